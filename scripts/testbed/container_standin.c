/*
 * TEST STAND-IN for the pyxis SPANK plugin. It runs no container.
 *
 * pyxis/enroot cannot run on the test machine, and real srun rejects --container-image without a
 * plugin that registers it ("srun: unrecognized option"). This plugin registers the same options
 * pyxis does, so real srun, sbatch and salloc accept and parse them, and exports what each option
 * received into the task's environment, so a job can print exactly what arrived:
 *
 *   SLURM_STANDIN_CONTAINER_IMAGE, _MOUNTS, _NAME, _WORKDIR, and _WRITABLE=1
 *
 * Enabled by scripts/local-cluster through /etc/slurm/plugstack.conf.d/.
 */
#include <slurm/spank.h>
#include <stdlib.h>
#include <string.h>

SPANK_PLUGIN(container_standin, 1);

static char *image, *mounts, *name, *workdir;
static int writable;

static int set_opt(int val, const char *optarg, int remote)
{
    (void)remote;
    char **slot = NULL;
    switch (val) {
    case 1: slot = &image; break;
    case 2: slot = &mounts; break;
    case 3: slot = &name; break;
    case 4: slot = &workdir; break;
    case 5: writable = 1; return ESPANK_SUCCESS;
    default: return ESPANK_BAD_ARG;
    }
    free(*slot);
    *slot = strdup(optarg ? optarg : "");
    return ESPANK_SUCCESS;
}

struct spank_option spank_options[] = {
    {"container-image", "[USER@][REGISTRY#]IMAGE[:TAG]|PATH", "[stand-in] container image", 1, 1, set_opt},
    {"container-mounts", "SRC:DST[:FLAGS][,SRC:DST...]", "[stand-in] bind mounts", 1, 2, set_opt},
    {"container-name", "NAME", "[stand-in] named container", 1, 3, set_opt},
    {"container-workdir", "PATH", "[stand-in] working directory", 1, 4, set_opt},
    {"container-writable", NULL, "[stand-in] writable container", 0, 5, set_opt},
    SPANK_OPTIONS_TABLE_END};

/* srun takes the options from the table above; sbatch and salloc (allocator context) only see
 * options registered here. */
int slurm_spank_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_context() == S_CTX_ALLOCATOR) {
        for (struct spank_option *o = spank_options; o->name; o++)
            spank_option_register(sp, o);
    }
    return ESPANK_SUCCESS;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (image) spank_setenv(sp, "SLURM_STANDIN_CONTAINER_IMAGE", image, 1);
    if (mounts) spank_setenv(sp, "SLURM_STANDIN_CONTAINER_MOUNTS", mounts, 1);
    if (name) spank_setenv(sp, "SLURM_STANDIN_CONTAINER_NAME", name, 1);
    if (workdir) spank_setenv(sp, "SLURM_STANDIN_CONTAINER_WORKDIR", workdir, 1);
    if (writable) spank_setenv(sp, "SLURM_STANDIN_CONTAINER_WRITABLE", "1", 1);
    return ESPANK_SUCCESS;
}
