complete -c slurm-sync-untracked -l lock-wait -d 'Seconds to wait while another sync into the same remote clone holds its lock (concurrent pipelines take turns there); after that, exit 4 naming the holder' -r
complete -c slurm-sync-untracked -l gzip -d 'Compress the stream with gzip (for slow links; costs CPU on both sides)'
complete -c slurm-sync-untracked -l full -d 'Send every untracked file, ignoring what the last sync recorded as sent (after files in the remote checkout were changed or removed there by hand)'
complete -c slurm-sync-untracked -l dry-run -d 'Say which untracked files a sync would consider sending (names and sizes, on stderr) and send nothing: no ssh connection, the document passed on unchanged'
complete -c slurm-sync-untracked -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-sync-untracked -s V -l version -d 'Print version'
