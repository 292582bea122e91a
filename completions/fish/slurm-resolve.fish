complete -c slurm-resolve -l catalog -d 'The cluster catalog (JSON, see docs/catalog.md). Default: $SLURM_TOOLS_CATALOG, else $XDG_CONFIG_HOME/slurm-tools/clusters.json when it exists' -r -F
complete -c slurm-resolve -l pick -d 'When several clusters match, take this one' -r
complete -c slurm-resolve -l wait-login -d 'With --place: wait up to this many seconds for a login to each cluster that needs one (its master opened, e.g. with the command placement prints), and ask it then, instead of going on without it' -r
complete -c slurm-resolve -l place -d 'Choose the catalog cluster where the request would start first: ask every cluster that can serve it (one ssh execution each, through its master or a key login) for Slurm\'s estimated start of exactly this request, the limits that would block it, the GPUs free now and your pending jobs there; write them all in the `placement` section'
complete -c slurm-resolve -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-resolve -s V -l version -d 'Print version'
