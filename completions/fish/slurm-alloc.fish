# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_slurm_alloc_global_optspecs
    string join \n h/help V/version
end

function __fish_slurm_alloc_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_slurm_alloc_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_slurm_alloc_using_subcommand
    set -l cmd (__fish_slurm_alloc_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c slurm-alloc -n "__fish_slurm_alloc_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-alloc -n "__fish_slurm_alloc_needs_command" -s V -l version -d 'Print version'
complete -c slurm-alloc -n "__fish_slurm_alloc_needs_command" -f -a "up" -d 'Hold the allocation (or find the one already held), wait until it runs'
complete -c slurm-alloc -n "__fish_slurm_alloc_needs_command" -f -a "exec" -d 'Run a command in the allocation: its stdout on stdout, its stderr on stderr, its exit code; the document only with --doc FILE'
complete -c slurm-alloc -n "__fish_slurm_alloc_needs_command" -f -a "down" -d 'Release it: remove the named container, kill the tmux session, cancel the allocation'
complete -c slurm-alloc -n "__fish_slurm_alloc_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand up" -l wait-timeout -d 'Seconds to wait for the allocation to start (with --wait, or when it starts soon)' -r
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand up" -l recheck-after -d 'Seconds between the walltime reduction and the re-check of the estimated start' -r
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand up" -l wait -d 'Keep waiting while the allocation pends, instead of exit 3 with suggestions'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand up" -l dry-run -d 'Say the salloc command line `up` would run and start nothing (no ssh connection; the document passed on unchanged)'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand up" -s h -l help -d 'Print help'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand exec" -l mode -d 'How the command is spread over the allocation' -r -f -a "single\t'One task in total'
per-node\t'One task per node'
mpi\t'A task per GPU with --mpi=pmix'
distributed\t'A task per GPU, RANK/LOCAL_RANK/WORLD_SIZE set'"
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand exec" -l lock-wait -d 'With --sync: seconds to wait while another sync into the same remote clone holds its lock (as slurm-sync-tracked\'s --lock-wait; default 600); after that, exit 4 naming the holder, and the command does not run' -r
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand exec" -l doc -d 'Write the document (with `allocation.last_exec`, and the sync sections with --sync) to FILE when the command ended, replacing FILE in one step (it may be the input file). Without it no document is written: stdout is the command\'s' -r -F
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand exec" -l writable -d 'Write outside the mounts: pyxis\'s --container-writable; on Apptainer the node\'s instance is always writable (its overlay), and where it does not run, a writable tmpfs over the image that goes with the command'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand exec" -l own-tree -d 'Run in a code tree of its own: the synced snapshot (`sync_tracked.commit`) and its untracked files, which later syncs do not change (as slurm-submit does for every job), instead of in the remote clone itself. Old trees are pruned as slurm-submit prunes them'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand exec" -l sync -d 'Sync first, in the same ssh execution: what `slurm-sync-tracked | slurm-sync-untracked | slurm-alloc exec` does, writing the same sections, with one execution instead of three (the inner loop at a login node\'s distance: edit, run again). The snapshot travels through origin; the command runs only when both syncs succeeded. A repository with submodules or Git LFS files is synced in executions of its own first (said so)'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand exec" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand down" -s h -l help -d 'Print help'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand help; and not __fish_seen_subcommand_from up exec down help" -f -a "up" -d 'Hold the allocation (or find the one already held), wait until it runs'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand help; and not __fish_seen_subcommand_from up exec down help" -f -a "exec" -d 'Run a command in the allocation: its stdout on stdout, its stderr on stderr, its exit code; the document only with --doc FILE'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand help; and not __fish_seen_subcommand_from up exec down help" -f -a "down" -d 'Release it: remove the named container, kill the tmux session, cancel the allocation'
complete -c slurm-alloc -n "__fish_slurm_alloc_using_subcommand help; and not __fish_seen_subcommand_from up exec down help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
