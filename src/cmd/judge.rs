//! `flotilla judge --input FILE`: compare a canary's metric series with a baseline's the way
//! Kayenta's judge does (one comparison, or a scored set of metrics), JSON in, JSON out.
//! Exit codes: 0 judged (whatever the verdict), 2 bad input.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use flotilla_core::judge::input::{MAX_INPUT_BYTES, judge_json};

#[derive(Debug, Args)]
pub struct JudgeArgs {
    /// A JSON comparison (`canary`, `baseline`, settings) or scored set (`metrics`,
    /// `groupWeights`, `thresholds`); `-` reads standard input. See docs/judge.md.
    #[arg(long, value_name = "FILE")]
    input: PathBuf,
}

pub fn run(args: JudgeArgs) -> anyhow::Result<ExitCode> {
    let name = args.input.display().to_string();
    let text = match read(&args.input) {
        Ok(text) => text,
        Err(error) => {
            eprintln!("flotilla judge: {name}: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    let answer = match judge_json(&text) {
        Ok(answer) => answer,
        Err(error) => {
            eprintln!("flotilla judge: {name}: {error}");
            return Ok(ExitCode::from(2));
        }
    };
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", serde_json::to_string_pretty(&answer)?)?;
    Ok(ExitCode::SUCCESS)
}

/// Reads the input, refusing more than the size limit before reading it all.
fn read(path: &std::path::Path) -> Result<String, String> {
    use std::io::Read;
    let limit = MAX_INPUT_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    let result = if path.as_os_str() == "-" {
        std::io::stdin().lock().take(limit).read_to_end(&mut bytes)
    } else {
        std::fs::File::open(path).and_then(|f| f.take(limit).read_to_end(&mut bytes))
    };
    result.map_err(|e| e.to_string())?;
    if bytes.len() > MAX_INPUT_BYTES {
        return Err("larger than the limit of 16 MiB".to_owned());
    }
    String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())
}
