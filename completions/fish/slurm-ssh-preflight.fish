complete -c slurm-ssh-preflight -l establish-timeout -d 'Seconds to wait for the interactive login with --establish' -r
complete -c slurm-ssh-preflight -l establish -d 'When an MFA login is needed, log in now, attached to your terminal (ssh prompts on the tty although stdin carries the document): that one ssh opens the managed ControlMaster (ControlPersist=24h) and runs the remote check through it. With `slurm_password` in the document, ssh gets it through SSH_ASKPASS, never argv'
complete -c slurm-ssh-preflight -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-ssh-preflight -s V -l version -d 'Print version'
