complete -c slurm-attach -l command -d 'Run this command (shell text) instead of an interactive shell' -r
complete -c slurm-attach -l node -d 'The node to go to (one of the job\'s; default: Slurm picks the job\'s first)' -r
complete -c slurm-attach -l ssh-config -d 'Write an ssh `Host slurm-job-<jobid>` entry to FILE (replacing this job\'s entry, keeping the rest) that reaches the job\'s node through the ControlMaster, for VS Code / PyCharm Remote-SSH, ssh, scp and rsync (`ssh -F FILE slurm-job-<jobid>`, or `Include FILE` in ~/.ssh/config). It runs the OpenSSH server as a step of the job (`sshd -i`, as you, no root), which accepts only a key made for this; the nodes need the sshd binary installed' -r -F
complete -c slurm-attach -l no-container -d 'Stay outside the job\'s container (on the node itself)'
complete -c slurm-attach -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-attach -s V -l version -d 'Print version'
