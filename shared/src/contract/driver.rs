//! The one way in and out of every tool: parse flags, read the document, pass an upstream error
//! through, take the secrets out, run the tool's step, write the document once, exit.
//!
//! A tool's `main` is one call to [`run`]; its own code only does its step on a [`Context`].
//! Nothing else in the project writes to stdout or chooses an exit code, so the contract's I/O
//! rules hold for every tool by construction.

use crate::contract::doc::{source_name, Document, Secrets, MAX_DOCUMENT_BYTES};
use crate::contract::error::{Result, ToolError};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The positional argument every tool has.
#[derive(Debug, Clone, clap::Args)]
pub struct InputArg {
    /// The job document to read (JSON object). Absent or `-` reads it from stdin.
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
}

impl InputArg {
    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref().filter(|p| p.as_os_str() != "-")
    }
}

/// Implemented by each tool's clap struct so the driver can find the input.
pub trait ToolCli: clap::Parser {
    fn input(&self) -> &InputArg;

    /// Whether the step runs even when the document carries an upstream `error` (only
    /// slurm-report, which shows it). Every other tool passes such a document on untouched.
    fn handles_upstream_error(&self) -> bool {
        false
    }

    /// The sections this tool writes (names in [`crate::contract::schema::sections`]). Its `--help` says
    /// what they hold where its doc comment has the line [`ADDS_MARKER`], generated from the
    /// types, so the help cannot drift from what the tool writes.
    const SECTIONS: &'static [&'static str] = &[];

    /// The document fields and sections this tool reads: its input type's `reads()` (see
    /// [`crate::contract::input`]). Its `--help` names them where its doc comment has the line
    /// [`READS_MARKER`].
    fn reads() -> Vec<&'static str> {
        Vec::new()
    }

    /// Where the document goes. Stdout, except for a tool that runs a person's command there
    /// (slurm-alloc exec, slurm-attach with a shell or `--command`): stdout is the command's.
    fn document_to(&self) -> DocumentTo {
        DocumentTo::Stdout
    }
}

/// Where a tool writes its document (docs/contract.md, "Standard streams").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DocumentTo {
    Stdout,
    /// `--doc FILE`: written there when the tool ends, replacing the file in one step.
    File(std::path::PathBuf),
    /// A command's output has stdout, and no `--doc` was given: the document is not written
    /// (an error is still said on stderr, and in the exit code).
    Nowhere,
}

/// The line in a tool's doc comment that becomes its generated "Adds the `x` section: ..." text.
pub const ADDS_MARKER: &str = "{adds}";

/// The line in a tool's doc comment that becomes its generated "Reads: ..." text.
pub const READS_MARKER: &str = "{reads}";

/// The tool's clap command with the generated "Reads" and "Adds" text in its long help.
pub fn command<C: ToolCli>() -> clap::Command {
    let cmd = C::command();
    let Some(about) = cmd.get_long_about().map(|a| a.to_string()) else {
        return cmd;
    };
    let adds: Vec<String> = C::SECTIONS
        .iter()
        .map(|s| wrap(&crate::contract::schema::adds_text(s), 96))
        .collect();
    let reads = wrap(&format!("Reads: {}.", C::reads().join(", ")), 96);
    cmd.long_about(
        about
            .replace(ADDS_MARKER, &adds.join("\n"))
            .replace(READS_MARKER, &reads),
    )
}

/// For each tool's unit test: its long help has the generated "Adds" text for every section it
/// writes, every field named, and no marker left. Panics with what is wrong.
pub fn assert_help_names_its_sections<C: ToolCli>() {
    let help = command::<C>().render_long_help().to_string();
    for marker in [ADDS_MARKER, READS_MARKER] {
        assert!(
            !help.contains(marker),
            "the {marker} marker was not replaced:\n{help}"
        );
    }
    if C::command()
        .get_long_about()
        .is_some_and(|a| a.to_string().contains(READS_MARKER))
    {
        assert!(
            !C::reads().is_empty(),
            "the help has {READS_MARKER}, and the tool reads nothing: give its ToolCli a `reads()`"
        );
    }
    let known = crate::contract::schema::document_fields();
    for field in C::reads() {
        assert!(
            known.contains(&field),
            "the tool reads `{field}`, which the job document does not declare (shared::contract::schema::JobDocument)"
        );
    }
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for section in C::SECTIONS {
        let fields = crate::contract::schema::sections()
            .into_iter()
            .find(|(n, _)| n == section)
            .unwrap_or_else(|| panic!("no schema type for section `{section}`"))
            .1;
        assert!(
            flat.contains(&format!("Adds the `{section}` section")),
            "--help does not say it adds `{section}`:\n{help}"
        );
        for f in fields {
            assert!(
                flat.contains(&format!(" {f},")) || flat.contains(&format!(" {f}.")),
                "--help does not name `{section}.{f}`:\n{help}"
            );
        }
    }
}

/// Words joined into lines of at most `width` columns.
fn wrap(text: &str, width: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for w in text.split_whitespace() {
        if !line.is_empty() && line.len() + 1 + w.len() > width {
            out.push_str(&line);
            out.push('\n');
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(w);
    }
    out.push_str(&line);
    out
}

/// What a tool's step works on.
pub struct Context {
    pub tool: &'static str,
    pub doc: Document,
    pub secrets: Secrets,
    after_written: Vec<Box<dyn FnOnce()>>,
}

impl Context {
    /// Run `f` once the step succeeded and its output reached stdout, and not otherwise (used to
    /// drop state that only matters while nobody has been told the result).
    pub fn after_written(&mut self, f: impl FnOnce() + 'static) {
        self.after_written.push(Box::new(f));
    }

    /// A progress or diagnostic line on stderr, prefixed with the tool's name.
    pub fn note(&self, msg: impl AsRef<str>) {
        crate::support::ui::note(self.tool, msg.as_ref());
    }

    pub fn warn(&self, msg: impl AsRef<str>) {
        crate::support::ui::warn(self.tool, msg.as_ref());
    }
}

/// How a successful step ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Exit 0.
    Done,
    /// Exit 1: `slurm-watch` only, the job ended with a status other than PASSED.
    JobNotPassed,
    /// `slurm-report --table`: this text goes to stdout instead of the document, with the exit
    /// code given (0 passed, 1 not passed, or the error's code).
    Text(String, u8),
    /// `slurm-alloc exec`, slurm-attach: the exit code of the command it ran (the document goes
    /// where [`ToolCli::document_to`] says).
    Exit(u8),
}

/// The command line handed over by the one-program build (tools/slurm-tools: `slurm-tools
/// slurm-resolve ARGS` runs slurm-resolve with `slurm-resolve ARGS`).
static ARGS: std::sync::OnceLock<Vec<std::ffi::OsString>> = std::sync::OnceLock::new();

/// The tool's command line: the one handed over by the one-program build, else the process's.
pub fn args_os() -> Vec<std::ffi::OsString> {
    ARGS.get()
        .cloned()
        .unwrap_or_else(|| std::env::args_os().collect())
}

/// Hand the tool its command line (the one-program build only; once, before the tool runs).
pub fn set_args(args: Vec<std::ffi::OsString>) {
    let _ = ARGS.set(args);
}

/// Run a tool. `step` is the tool's own work.
/// `SLURM_TOOLS_GENERATE=man|bash|zsh|fish|elvish|powershell`: print the man page or a shell
/// completion script generated from the tool's clap definition, and exit (scripts/gen-docs).
fn generate<C: ToolCli>(tool: &str, what: &str) -> ExitCode {
    generate_for(command::<C>(), tool, what)
}

/// Run a tool that reads no job document (slurm-runs, slurm-notify): the same flag handling and
/// generated docs as [`run`]; `step` returns the exit code, or an error said on stderr.
pub fn run_plain<C: clap::Parser>(
    tool: &'static str,
    step: impl FnOnce(&C) -> Result<u8>,
) -> ExitCode {
    if let Ok(what) = std::env::var("SLURM_TOOLS_GENERATE") {
        return generate_for(C::command(), tool, &what);
    }
    let cli = match C::try_parse_from(args_os()) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    match step(&cli) {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            crate::support::ui::error(tool, &e);
            ExitCode::from(e.kind.exit_code() as u8)
        }
    }
}

/// `generate` for a tool that reads no job document (slurm-runs, slurm-notify).
pub fn generate_for(mut cmd: clap::Command, tool: &str, what: &str) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let result = match what {
        "schema" => out.write_all(crate::contract::schema::schema_json().as_bytes()),
        // The page names the version alone: the commit in `--version` would change every page
        // with every commit.
        "man" => clap_mangen::Man::new(cmd.long_version(None)).render(&mut out),
        shell => match shell.parse::<clap_complete::Shell>() {
            Ok(sh) => {
                clap_complete::generate(sh, &mut cmd, tool, &mut out);
                Ok(())
            }
            Err(_) => {
                crate::support::ui::note(tool, &format!("SLURM_TOOLS_GENERATE={what}: expected man, bash, zsh, fish, elvish or powershell"));
                return ExitCode::from(2);
            }
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(_) => ExitCode::from(4),
    }
}

pub fn run<C: ToolCli>(
    tool: &'static str,
    step: impl FnOnce(&C, &mut Context) -> Result<Outcome>,
) -> ExitCode {
    if let Ok(what) = std::env::var("SLURM_TOOLS_GENERATE") {
        return generate::<C>(tool, &what);
    }
    let parsed = command::<C>()
        .try_get_matches_from(args_os())
        .and_then(|mut m| C::from_arg_matches_mut(&mut m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version go to stdout with exit 0; usage errors to stderr with exit 2.
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let input = cli.input().path().map(Path::to_path_buf);
    let source = source_name(input.as_deref());
    let to = cli.document_to();

    let mut doc =
        match read_input(input.as_deref(), &source).and_then(|b| Document::parse(&b, &source)) {
            Ok(doc) => doc,
            Err(e) => {
                // Nothing usable came in: pass on a document that says so, so a pipeline's final
                // output still tells what failed.
                let mut doc = Document::from_map(Default::default());
                return finish(tool, &to, &mut doc, Err(e));
            }
        };

    if let (Some(code), false) = (doc.upstream_error(), cli.handles_upstream_error()) {
        let from = doc
            .section("error")
            .and_then(|e| e.get("tool"))
            .and_then(|t| t.as_str())
            .unwrap_or("an earlier tool")
            .to_string();
        crate::support::ui::note(
            tool,
            &format!("the document carries an error from {from}; passing it on untouched"),
        );
        doc.take_secrets();
        return write_and_exit(tool, &to, &doc, code);
    }

    if let Err(e) = doc.check_contract_version() {
        doc.take_secrets();
        return finish(tool, &to, &mut doc, Err(e));
    }
    let secrets = doc.take_secrets();
    for path in &secrets.dropped {
        crate::support::ui::note(
            tool,
            &format!("dropped the secret field `{path}` (secrets are never written out)"),
        );
    }
    let mut ctx = Context {
        tool,
        doc,
        secrets,
        after_written: Vec::new(),
    };
    let before = ctx.doc.clone();
    let result = step(&cli, &mut ctx);
    let succeeded = result.is_ok();
    let mut doc = ctx.doc;
    // A document the step left as it was (slurm-report) passes on exactly as it came.
    let changed = doc != before || result.is_err();
    let (code, written) = finish_written(tool, &to, &mut doc, result, changed);
    if succeeded && written {
        ctx.after_written.into_iter().for_each(|f| f());
    }
    code
}

fn finish(
    tool: &'static str,
    to: &DocumentTo,
    doc: &mut Document,
    result: Result<Outcome>,
) -> ExitCode {
    finish_written(tool, to, doc, result, true).0
}

/// Write the outcome; the exit code, and whether the output reached stdout.
fn finish_written(
    tool: &'static str,
    to: &DocumentTo,
    doc: &mut Document,
    result: Result<Outcome>,
    stamp: bool,
) -> (ExitCode, bool) {
    let code = match result {
        Ok(Outcome::Done) => 0,
        Ok(Outcome::JobNotPassed) => 1,
        Ok(Outcome::Exit(code)) => i32::from(code),
        Ok(Outcome::Text(text, code)) => {
            let mut out = std::io::stdout().lock();
            if let Err(e) = out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
                crate::support::ui::note(tool, &format!("could not write to stdout: {e}"));
                return (ExitCode::from(4), false);
            }
            return (ExitCode::from(code), true);
        }
        Err(e) => {
            crate::support::ui::error(tool, &e);
            doc.set_section("error", &e.to_section(tool));
            e.kind.exit_code()
        }
    };
    if stamp {
        doc.stamp_contract_version();
    }
    write_doc(tool, to, doc, code)
}

/// Pass a document on exactly as it came (an upstream error): not even the version is stamped.
fn write_and_exit(tool: &str, to: &DocumentTo, doc: &Document, code: i32) -> ExitCode {
    write_doc(tool, to, doc, code).0
}

fn write_doc(tool: &str, to: &DocumentTo, doc: &Document, code: i32) -> (ExitCode, bool) {
    match to {
        DocumentTo::Stdout => {}
        DocumentTo::Nowhere => return (ExitCode::from(code as u8), true),
        DocumentTo::File(path) => {
            return match crate::state::private_files::write_atomic(
                path,
                doc.to_line().as_bytes(),
                0o644,
            ) {
                Ok(()) => (ExitCode::from(code as u8), true),
                Err(e) => {
                    crate::support::ui::note(
                        tool,
                        &format!("could not write the document to {}: {e}", path.display()),
                    );
                    (ExitCode::from(4), false)
                }
            };
        }
    }
    let mut out = std::io::stdout().lock();
    if let Err(e) = out
        .write_all(doc.to_line().as_bytes())
        .and_then(|()| out.flush())
    {
        crate::support::ui::note(
            tool,
            &format!("could not write the document to stdout: {e}"),
        );
        return (ExitCode::from(4), false);
    }
    (ExitCode::from(code as u8), true)
}

fn read_input(path: Option<&Path>, source: &str) -> Result<Vec<u8>> {
    let limit = MAX_DOCUMENT_BYTES as u64 + 1;
    let mut buf = Vec::new();
    match path {
        Some(p) => {
            let f = std::fs::File::open(p).map_err(|e| {
                ToolError::bad_input(format!("cannot read the job document {source}: {e}"))
                    .with_hint("check the file name given as the positional argument")
            })?;
            f.take(limit).read_to_end(&mut buf)
        }
        None => {
            if std::io::stdin().is_terminal() {
                return Err(ToolError::bad_input("no job document: stdin is a terminal")
                    .with_hint("pipe a document in (`tool < job.json`) or name the file as the argument; see --help"));
            }
            std::io::stdin().lock().take(limit).read_to_end(&mut buf)
        }
    }
    .map_err(|e| ToolError::bad_input(format!("cannot read the job document from {source}: {e}")))?;
    Ok(buf)
}
