//! The exit codes of the tools' remote scripts, named once for the shell text and the Rust that
//! maps them to messages.
//!
//! Each tool's codes are an enum made by `remote_exit_codes!`: the script gets every name as a
//! shell variable ([`assign`]) and exits with `exit "$E_LOCKED"`; the Rust side turns the exit
//! status back into the enum ([`ExitCodes::from_status`]). Ranges never overlap between tools (a
//! test checks), so a code in a trace or a bug report names one failure.

use crate::remote::quote::Script;
use crate::Result;

/// A tool's set of remote exit codes.
pub trait ExitCodes: Sized + Copy + 'static {
    const ALL: &'static [Self];
    /// The shell variable the script exits with (`E_...`).
    fn var(self) -> &'static str;
    fn code(self) -> i32;
    /// The code an exit status stands for, if it is one of ours.
    fn from_status(status: Option<i32>) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| Some(c.code()) == status)
    }
}

/// Assign every code of `E` as a shell variable at the top of a script.
pub fn assign<E: ExitCodes>(s: &mut Script) -> Result<()> {
    for c in E::ALL {
        s.assign(c.var(), &c.code().to_string())?;
    }
    Ok(())
}

/// `enum Name { Variant = code => "E_VAR", ... }`, implementing [`ExitCodes`].
#[macro_export]
macro_rules! remote_exit_codes {
    ($(#[$meta:meta])* pub enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal => $var:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $name { $($(#[$vmeta])* $variant),* }
        impl $crate::remote::exit::ExitCodes for $name {
            const ALL: &'static [Self] = &[$($name::$variant),*];
            fn var(self) -> &'static str { match self { $($name::$variant => $var),* } }
            fn code(self) -> i32 { match self { $($name::$variant => $code),* } }
        }
    };
}

remote_exit_codes! {
    /// slurm-sync-tracked's checkout scripts.
    pub enum SyncTracked {
        Locked = 10 => "E_LOCKED",
        Clone = 11 => "E_CLONE",
        Fetch = 12 => "E_FETCH",
        Checkout = 13 => "E_CHECKOUT",
        Refresh = 14 => "E_REFRESH",
        Mkdir = 15 => "E_MKDIR",
        Enter = 16 => "E_ENTER",
        Stash = 17 => "E_STASH",
        NotARepo = 18 => "E_NOT_A_REPO",
        LostLock = 19 => "E_LOST_LOCK",
        Unrelated = 21 => "E_UNRELATED",
        Submodule = 22 => "E_SUBMODULE",
        Lfs = 23 => "E_LFS",
    }
}

remote_exit_codes! {
    /// slurm-sync-untracked's extraction script.
    pub enum SyncUntracked {
        NoCheckout = 20 => "E_NO_CHECKOUT",
        /// Another run held the clone's lock for the whole wait.
        Locked = 24 => "E_LOCKED",
    }
}

remote_exit_codes! {
    /// slurm-submit's upload-and-submit script.
    pub enum Submit {
        UploadDir = 30 => "E_UPLOAD_DIR",
        Extract = 31 => "E_EXTRACT",
        NoCheckout = 32 => "E_NO_CHECKOUT",
        SubmitFailed = 33 => "E_SUBMIT",
        Tree = 34 => "E_TREE",
        TmuxStart = 35 => "E_TMUX_START",
        SrunExited = 36 => "E_SRUN_EXITED",
        NoJobId = 37 => "E_NO_JOB_ID",
        NoTmux = 38 => "E_NO_TMUX",
        LockTimeout = 39 => "E_LOCK_TIMEOUT",
        LockFailed = 40 => "E_LOCK_FAILED",
        ArrayTooBig = 41 => "E_ARRAY_TOO_BIG",
    }
}

remote_exit_codes! {
    /// slurm-alloc's scripts.
    pub enum Alloc {
        TmuxStart = 50 => "E_TMUX_START",
        SallocExited = 51 => "E_SALLOC_EXITED",
        NoJobId = 52 => "E_NO_JOB_ID",
        Import = 53 => "E_IMPORT",
        Packages = 54 => "E_PACKAGES",
        NoPython = 55 => "E_NO_PYTHON",
    }
}

remote_exit_codes! {
    /// slurm-attach's check of the job before going in.
    pub enum Attach {
        Pending = 70 => "E_PENDING",
        Gone = 71 => "E_GONE",
        NotRunning = 72 => "E_NOT_RUNNING",
    }
}

remote_exit_codes! {
    /// slurm-watch's poll loop.
    pub enum Watch {
        BadRequest = 60 => "E_BAD_REQUEST",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes<E: ExitCodes>() -> Vec<(i32, &'static str)> {
        E::ALL.iter().map(|c| (c.code(), c.var())).collect()
    }

    #[test]
    fn no_two_tools_share_a_code_and_none_is_reserved() {
        let mut all = Vec::new();
        all.extend(codes::<SyncTracked>());
        all.extend(codes::<SyncUntracked>());
        all.extend(codes::<Submit>());
        all.extend(codes::<Alloc>());
        all.extend(codes::<Watch>());
        all.extend(codes::<Attach>());
        let mut values: Vec<i32> = all.iter().map(|c| c.0).collect();
        values.sort_unstable();
        let n = values.len();
        values.dedup();
        assert_eq!(values.len(), n, "a code is used twice: {all:?}");
        // 0-4 are the contract's, 126-127 the shell's, 255 ssh's.
        assert!(values.iter().all(|v| (10..126).contains(v)), "{values:?}");
        assert_eq!(Submit::from_status(Some(39)), Some(Submit::LockTimeout));
        assert_eq!(Submit::from_status(Some(10)), None);
        assert_eq!(Submit::from_status(None), None);
    }

    #[test]
    fn the_script_gets_every_name() {
        let mut s = Script::new();
        assign::<Alloc>(&mut s).unwrap();
        for (code, var) in codes::<Alloc>() {
            assert!(
                s.as_str().contains(&format!("{var}={code}")),
                "{}",
                s.as_str()
            );
        }
    }
}
