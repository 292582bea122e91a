complete -c slurm-sync-tracked -l via -d 'Where the snapshot travels: through origin (a temporary branch, deleted afterwards) or directly into the remote clone over ssh (origin untouched)' -r -f -a "origin\t''
direct\t''"
complete -c slurm-sync-tracked -l lock-wait -d 'Seconds to wait while another sync into the same remote clone holds its lock (concurrent pipelines take turns there); after that, exit 4 naming the holder' -r
complete -c slurm-sync-tracked -l dry-run -d 'Build the snapshot and report what would be synced, without pushing or touching the remote (the snapshot commit exists only as an unreferenced local object)'
complete -c slurm-sync-tracked -l allow-unrelated -d 'Sync even when the local repository is not the one the document names: `repo_url` is none of its remotes, or the remote clone shares no commit with it. Without this flag such a sync is refused before anything is pushed (a sync run from the wrong directory would otherwise put one project\'s code over another\'s clone)'
complete -c slurm-sync-tracked -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-sync-tracked -s V -l version -d 'Print version'
