complete -c slurm-watch -l interval -d 'Longest time between polls, in seconds (default: poll_interval_seconds, else 30)' -r
complete -c slurm-watch -l outage-limit -d 'Give up after this many seconds without reaching the cluster or its controller (no verdict; rerun to resume)' -r
complete -c slurm-watch -l keep-on-timeout -d 'On monitor_timeout_seconds, leave the job running instead of cancelling it'
complete -c slurm-watch -l follow -d 'Stream new log lines to stderr as they arrive'
complete -c slurm-watch -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-watch -s V -l version -d 'Print version'
