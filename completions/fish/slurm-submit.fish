complete -c slurm-submit -l keep-trees -d 'How many finished jobs\' code trees to keep (besides those of jobs still pending or running, which are never removed). Older ones are removed at each submission' -r
complete -c slurm-submit -l build -d 'Submit the build job instead of the run job'
complete -c slurm-submit -l dry-run -d 'Print the document with the exact command that would run; run nothing'
complete -c slurm-submit -l only-failed -d 'Run again only the tasks of a finished sweep that did not pass, with the same snapshot: the input is the sweep\'s watched document (with its report); the tasks that passed keep their verdicts (`sweep_done`), and the next slurm-watch reports all of them'
complete -c slurm-submit -l sync -d 'Sync first, in the submission\'s own ssh execution: what `slurm-sync-tracked | slurm-sync-untracked | slurm-submit` does, with one ssh execution instead of three, and the same sync sections written; nothing is submitted unless both syncs succeeded, and the submission\'s fields are checked before anything is pushed. The snapshot travels through origin. A repository with submodules or Git LFS files, or job files over 256 KiB, is synced in executions of its own first (said so)'
complete -c slurm-submit -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-submit -s V -l version -d 'Print version'
