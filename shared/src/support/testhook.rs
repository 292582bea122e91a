//! A test-only hook: `SLURM_TOOLS_PAUSE_AT=<step>` makes a tool stop for a while at a named step
//! of its work, so a test can kill it exactly there (docs/reliability.md: killed at every step).
//! Unset, it costs one environment lookup. The steps are listed where [`pause`] is called.

/// Pause at `step` when `SLURM_TOOLS_PAUSE_AT` names it (30 s, or `SLURM_TOOLS_PAUSE_SECONDS`),
/// announcing it on stderr so the test knows when to strike.
pub fn pause(step: &str) {
    if std::env::var("SLURM_TOOLS_PAUSE_AT").ok().as_deref() != Some(step) {
        return;
    }
    let secs = std::env::var("SLURM_TOOLS_PAUSE_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    crate::support::ui::note("test-hook", &format!("paused at {step}"));
    std::thread::sleep(std::time::Duration::from_secs(secs));
}
