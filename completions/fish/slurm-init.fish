complete -c slurm-init -l cluster -d 'The cluster\'s name in the catalog (default: the host\'s first label)' -r
complete -c slurm-init -l catalog -d 'The catalog to write (default: $XDG_CONFIG_HOME/slurm-tools/clusters.json, else ~/.config/slurm-tools/clusters.json)' -r -F
complete -c slurm-init -l account -d 'The account to use (default: your only one; several: exit 3 listing them)' -r
complete -c slurm-init -l partition -d 'The partition (default: the cluster\'s default partition)' -r
complete -c slurm-init -l qos -d 'The QoS (default: the only one your association lists, else its DefaultQOS, else none)' -r
complete -c slurm-init -l root -d 'Where clones go on the cluster (default: <scratch or home>/slurm-tools)' -r
complete -c slurm-init -l ssh-config -d 'The ssh config file to use (`ssh -F`)' -r
complete -c slurm-init -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-init -s V -l version -d 'Print version'
