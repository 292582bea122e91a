complete -c slurm-notify -l command -d 'Run this shell command for each event (`sh -c`)' -r
complete -c slurm-notify -l webhook-file -d 'POST each event as JSON to the http:// or https:// URL in this file (its first line). Without it, the URL in the environment variable SLURM_NOTIFY_WEBHOOK, if set' -r -F
complete -c slurm-notify -l webhook -d 'Refused: a URL on the command line is readable by every local user. Use --webhook-file or SLURM_NOTIFY_WEBHOOK' -r
complete -c slurm-notify -l only -d 'Only these events (comma-separated): submitted, pending, running, importing, progress, hang, ended, verdict' -r
complete -c slurm-notify -l sent-file -d 'Where delivered events are remembered (default: <state dir>/notify-sent.jsonl)' -r -F
complete -c slurm-notify -l follow -d 'Keep reading FILE as it grows (like `tail -f`), until killed'
complete -c slurm-notify -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-notify -s V -l version -d 'Print version'
