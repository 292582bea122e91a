complete -c slurm-report -l lines -d 'How many excerpt lines to show' -r
complete -c slurm-report -l table -d 'Print the table on stdout instead of the document'
complete -c slurm-report -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-report -s V -l version -d 'Print version'
