//! Generates eukhe's man pages and shell completions from its command-line
//! definition, for the packages: `eukhe-assets <out-dir>` writes
//! `man/eukhe.1`, `man/eukhe-<command>.1` for each command, and
//! `completions/{eukhe.bash,_eukhe,eukhe.fish}`.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::CommandFactory;
use clap_complete::Shell;
use eukhe::client::Cli;

fn main() -> ExitCode {
    let Some(out) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: eukhe-assets <out-dir>");
        return ExitCode::from(2);
    };
    match generate(&out) {
        Ok(written) => {
            println!("eukhe-assets: wrote {written} files to {}", out.display());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("eukhe-assets: {message}");
            ExitCode::FAILURE
        }
    }
}

fn generate(out: &Path) -> Result<usize, String> {
    let man = out.join("man");
    let completions = out.join("completions");
    for dir in [&man, &completions] {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut command = Cli::command();
    command.build();
    let mut written = 0;
    written += write_man(&man, "eukhe", command.clone())?;
    for sub in command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let name = format!("eukhe-{}", sub.get_name());
        let page = sub
            .clone()
            .display_name(name.clone())
            .bin_name(format!("eukhe {}", sub.get_name()));
        written += write_man(&man, &name, page)?;
    }
    for (shell, file) in [
        (Shell::Bash, "eukhe.bash"),
        (Shell::Zsh, "_eukhe"),
        (Shell::Fish, "eukhe.fish"),
    ] {
        let mut text = Vec::new();
        clap_complete::generate(shell, &mut command, "eukhe", &mut text);
        let path = completions.join(file);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written += 1;
    }
    Ok(written)
}

fn write_man(dir: &Path, name: &str, command: clap::Command) -> Result<usize, String> {
    let mut page = Vec::new();
    clap_mangen::Man::new(command)
        .title(name.to_uppercase())
        .section("1")
        .manual("eukhe manual")
        .source(format!("eukhe {}", env!("CARGO_PKG_VERSION")))
        .render(&mut page)
        .map_err(|e| format!("{name}(1): {e}"))?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(1)
}
