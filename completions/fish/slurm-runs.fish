complete -c slurm-runs -l cluster -d 'Only runs on this cluster (the catalog entry\'s name, else the ssh host); repeatable' -r
complete -c slurm-runs -l state -d 'Only runs in this state: a Slurm state (pending, running, completed, node_fail...), a verdict (passed, failed...), `active` or `finished`; repeatable, any case' -r
complete -c slurm-runs -l since -d 'Only runs submitted within this age: 90s, 30m, 12h, 3d, 2w' -r
complete -c slurm-runs -l name -d 'Only runs whose job name matches this glob (`*` and `?`)' -r
complete -c slurm-runs -l events -d 'With --watch (or for this one refresh): one JSON line per state change to FILE, or `-`' -r
complete -c slurm-runs -l interval -d 'Seconds between --watch polls' -r
complete -c slurm-runs -l ledger -d 'The ledger to read instead of the default one' -r -F
complete -c slurm-runs -l stats -d 'What the finished runs whose job name matches NAME (a glob) used, from each cluster\'s accounting (one sacct per cluster): elapsed time, peak memory, GPUs, their 90th percentile, and the `time_limit` and `mem` sized from them (what slurm-resolve\'s `size_from_history` fills in). A cluster without accounting says so' -r
complete -c slurm-runs -l json -d 'One JSON object per run, one per line, instead of the table'
complete -c slurm-runs -l no-refresh -d 'Show the ledger as it is: ask no cluster'
complete -c slurm-runs -l watch -d 'Poll until every listed unfinished run has ended, saying each change on stderr'
complete -c slurm-runs -l tasks -d 'Under each sweep (a job array), a line per task from its watched document: index, verdict, Slurm\'s state, parameters (a sweep not watched yet shows its counts only)'
complete -c slurm-runs -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-runs -s V -l version -d 'Print version'
