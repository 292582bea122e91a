complete -c slurm-attach -l command -d 'Run this command (shell text) instead of an interactive shell' -r
complete -c slurm-attach -l node -d 'The node to go to (one of the job\'s; default: Slurm picks the job\'s first)' -r
complete -c slurm-attach -l no-container -d 'Stay outside the job\'s container (on the node itself)'
complete -c slurm-attach -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-attach -s V -l version -d 'Print version'
