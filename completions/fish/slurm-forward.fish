complete -c slurm-forward -l port -d 'The port on the node' -r
complete -c slurm-forward -l port-file -d 'A file on the cluster holding the port (first number in it), written by the job' -r
complete -c slurm-forward -l local-port -d 'The local port (default: the remote port; 0: any free port)' -r
complete -c slurm-forward -l node -d 'The node (one of the job\'s; default: its first)' -r
complete -c slurm-forward -l cancel -d 'Remove the forward the document\'s `forward` section describes'
complete -c slurm-forward -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-forward -s V -l version -d 'Print version'
