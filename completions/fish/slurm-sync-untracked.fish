complete -c slurm-sync-untracked -l gzip -d 'Compress the stream with gzip (for slow links; costs CPU on both sides)'
complete -c slurm-sync-untracked -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-sync-untracked -s V -l version -d 'Print version'
