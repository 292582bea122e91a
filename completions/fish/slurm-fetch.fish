complete -c slurm-fetch -s p -l pattern -d 'A glob relative to the job\'s tree (`work:GLOB`: relative to its work directory); repeatable' -r
complete -c slurm-fetch -l to -d 'The local directory (default: <local_dir>/fetched/<job id>, else ~/.local/state/slurm-tools/fetched/<cluster>-<job id>)' -r -F
complete -c slurm-fetch -l max-bytes -d 'Copy at most this much in one run: bytes, or with K, M, G (powers of 1000) or KiB, MiB, GiB' -r
complete -c slurm-fetch -l no-logs -d 'Leave the job\'s logs out'
complete -c slurm-fetch -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-fetch -s V -l version -d 'Print version'
