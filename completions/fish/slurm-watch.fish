complete -c slurm-watch -l interval -d 'Longest time between polls, in seconds (default: poll_interval_seconds, else 30)' -r
complete -c slurm-watch -l outage-limit -d 'Give up after this many seconds without reaching the cluster or its controller (no verdict; rerun to resume)' -r
complete -c slurm-watch -l events -d 'Append one JSON line per state change to FILE (submitted, pending with its reason, its category, explanation and action, and estimated start, running, importing, progress, hang, verdict): a file, a named pipe, or /dev/fd/N for a descriptor the shell opened. For `| jq` or `| slurm-notify`' -r
complete -c slurm-watch -l retry -d 'When the job ends NODE_FAIL, PREEMPTED or BOOT_FAIL (the infrastructure\'s fault, never FAILED), submit it again with the nodes it ran on excluded and watch that, at most N times. Each attempt is in `attempts` and linked in the ledger' -r
complete -c slurm-watch -l race -d 'The same job submitted elsewhere (other clusters or partitions): the documents slurm-submit wrote for them. Whichever of these and the input\'s job starts first is kept and watched; the others are cancelled (only those jobs), each cancel recorded in the ledger; the output is the winner\'s document with the `race` section' -r -F
complete -c slurm-watch -l keep-on-timeout -d 'On monitor_timeout_seconds, leave the job running instead of cancelling it'
complete -c slurm-watch -l follow -d 'Stream new log lines to stderr as they arrive'
complete -c slurm-watch -l cancel -d 'Cancel the job first (scancel; a sweep: every task), then watch it to its verdict: CANCELLED, or the verdict it had already reached. Recorded in the ledger as cancelled by `slurm-watch --cancel` (slurm-mcp names its client instead, in SLURM_TOOLS_CANCELLED_BY)'
complete -c slurm-watch -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-watch -s V -l version -d 'Print version'
