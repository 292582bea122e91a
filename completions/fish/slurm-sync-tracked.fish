complete -c slurm-sync-tracked -l via -d 'Where the snapshot travels: through origin (a temporary branch, deleted afterwards) or directly into the remote clone over ssh (origin untouched)' -r -f -a "origin\t''
direct\t''"
complete -c slurm-sync-tracked -l dry-run -d 'Build the snapshot and report what would be synced, without pushing or touching the remote (the snapshot commit exists only as an unreferenced local object)'
complete -c slurm-sync-tracked -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-sync-tracked -s V -l version -d 'Print version'
