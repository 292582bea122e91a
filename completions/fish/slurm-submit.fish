complete -c slurm-submit -l keep-trees -d 'How many finished jobs\' code trees to keep (besides those of jobs still pending or running, which are never removed). Older ones are removed at each submission' -r
complete -c slurm-submit -l build -d 'Submit the build job instead of the run job'
complete -c slurm-submit -l dry-run -d 'Print the document with the exact command that would run; run nothing'
complete -c slurm-submit -l only-failed -d 'Run again only the tasks of a finished sweep that did not pass, with the same snapshot: the input is the sweep\'s watched document (with its report); the tasks that passed keep their verdicts (`sweep_done`), and the next slurm-watch reports all of them'
complete -c slurm-submit -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-submit -s V -l version -d 'Print version'
