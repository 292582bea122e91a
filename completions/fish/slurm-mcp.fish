complete -c slurm-mcp -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-mcp -s V -l version -d 'Print version'
