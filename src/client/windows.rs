//! `eukhe log S --raw N` with `--head`, `--tail`, `--bytes` or `--grep`: a
//! window of one run's output, asked of the session (`session::windows`
//! reads it), written exactly (a grep's lines numbered as `grep -n`
//! numbers them), and the whole output's size on standard error.

use std::process::ExitCode;

use super::attach::open;
use super::cli::unexpected;
use super::error::ClientError;
use super::stdout;
use crate::laws::replace::ClientStart;
use crate::protocol::entry::Stream;
use crate::protocol::message::{Response, SessionRequest};
use crate::protocol::window::{OutputWindow, PartStart, WindowSummary};

/// The window flags of `log`.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct WindowFlags {
    /// With --raw: only the output's first LINES lines (with --tail and
    /// --raw, the last LINES lines). The whole output's size goes to
    /// standard error.
    #[arg(long, value_name = "LINES", requires = "raw", conflicts_with_all = ["bytes", "grep", "tail", "follow"])]
    pub head: Option<u64>,
    /// With --raw: only the output's bytes START to END (END left out; to
    /// the end without it), e.g. `--bytes 1000:2000` or `--bytes 1000:`.
    #[arg(long, value_name = "START:END", value_parser = parse_range, requires = "raw", conflicts_with_all = ["grep", "tail", "follow"])]
    pub bytes: Option<(u64, Option<u64>)>,
    /// With --raw: only the output's lines REGEX matches, numbered (`N:`),
    /// with `--` between groups, as `grep -n` writes them.
    #[arg(long, value_name = "REGEX", requires = "raw", conflicts_with_all = ["tail", "follow"])]
    pub grep: Option<String>,
    /// With --grep: K lines of context around each match (`N-`).
    #[arg(short = 'C', long, value_name = "K", requires = "grep")]
    pub context: Option<u64>,
    /// With --grep: stop after N matching lines.
    #[arg(short = 'm', long, value_name = "N", requires = "grep")]
    pub max_count: Option<u64>,
}

/// `START:END` or `START:` (or `START` alone).
pub(crate) fn parse_range(text: &str) -> Result<(u64, Option<u64>), String> {
    let (start, end) = text.split_once(':').unwrap_or((text, ""));
    let number = |s: &str| {
        s.trim()
            .parse::<u64>()
            .map_err(|_| format!("{text:?} is not START:END (byte offsets)"))
    };
    let start = number(start)?;
    let end = match end.trim() {
        "" => None,
        end => Some(number(end)?),
    };
    if end.is_some_and(|end| end < start) {
        return Err(format!("{text:?}: END comes before START"));
    }
    Ok((start, end))
}

impl WindowFlags {
    /// The window asked for: these flags, or `--tail` (lines, with --raw
    /// and without --follow).
    pub fn window(&self, tail: Option<u64>) -> Option<OutputWindow> {
        if let Some(lines) = self.head {
            return Some(OutputWindow::Head { lines });
        }
        if let Some((start, end)) = self.bytes {
            return Some(OutputWindow::Bytes { start, end });
        }
        if let Some(pattern) = &self.grep {
            return Some(OutputWindow::Grep {
                pattern: pattern.clone(),
                context: self.context.unwrap_or(0),
                max_count: self.max_count,
            });
        }
        tail.map(|lines| OutputWindow::Tail { lines })
    }
}

/// One part of a window as it came.
#[derive(Debug, Default)]
pub(crate) struct ShownPart {
    pub start: PartStart,
    pub data: Vec<u8>,
}

/// Ask `session` for `window` of input `input`'s output (`stream`, or
/// both): its parts and the whole output's size.
pub(crate) async fn fetch(
    session: &str,
    input: u64,
    stream: Option<Stream>,
    window: OutputWindow,
    start: ClientStart,
) -> Result<(Vec<ShownPart>, WindowSummary), ClientError> {
    let request = SessionRequest::Window {
        input,
        stream,
        window,
    };
    let mut client = open(session, start, request).await?;
    let mut parts: Vec<ShownPart> = Vec::new();
    loop {
        match client.receive().await? {
            Response::WindowPart(start) => parts.push(ShownPart {
                start,
                data: Vec::new(),
            }),
            Response::Output { data, .. } => match parts.last_mut() {
                Some(part) => part.data.extend_from_slice(&data),
                None => {
                    return unexpected(Response::Output {
                        stream: Stream::Stdout,
                        data,
                    })
                }
            },
            Response::WindowEnd(summary) => return Ok((parts, summary)),
            other => return unexpected(other),
        }
    }
}

/// A grep's parts as `grep -n` writes them: `N:` before a matching line,
/// `N-` before a context line, `--` between groups when there is context.
pub(crate) fn numbered(parts: &[ShownPart], regex: &regex::bytes::Regex, context: bool) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        if i > 0 && context {
            out.extend_from_slice(b"--\n");
        }
        let lines = part.data.split_inclusive(|&b| b == b'\n');
        for (line, text) in (part.start.line..).zip(lines) {
            let bare = text.strip_suffix(b"\n").unwrap_or(text);
            let mark = if regex.is_match(bare) { ':' } else { '-' };
            out.extend_from_slice(format!("{line}{mark}").as_bytes());
            out.extend_from_slice(bare);
            out.push(b'\n');
        }
    }
    out
}

/// `eukhe log`: a window when `--raw` has one, else the log.
pub async fn log(args: super::log::LogArgs) -> Result<ExitCode, ClientError> {
    // With --raw, --tail counts the output's lines (without --follow).
    let tail_lines = args.tail.filter(|_| !args.follow);
    if let (Some(input), Some(window)) = (args.raw, args.window.window(tail_lines)) {
        return show(&args.session, input, args.stream, window, args.json).await;
    }
    if args.raw.is_some() && args.json {
        return Err(ClientError::Usage(
            "--json with --raw needs a window: --head, --tail, --bytes or --grep".into(),
        ));
    }
    super::log::log(args).await
}

/// `eukhe log S --raw N` with a window: the bytes on standard output, the
/// size on standard error (or both as one JSON object with `--json`). A
/// grep that matches nothing exits 1, as grep does.
pub async fn show(
    session: &str,
    input: u64,
    stream: Option<Stream>,
    window: OutputWindow,
    json: bool,
) -> Result<ExitCode, ClientError> {
    let grep = match &window {
        OutputWindow::Grep {
            pattern, context, ..
        } => Some((
            regex::bytes::Regex::new(pattern)
                .map_err(|e| ClientError::Usage(format!("--grep {pattern:?}: {e}")))?,
            *context > 0,
        )),
        _ => None,
    };
    let (parts, summary) = fetch(session, input, stream, window, ClientStart::Log).await?;
    let matched = summary.matches != Some(0);
    if json {
        let parts: Vec<_> = parts
            .iter()
            .map(|part| {
                let mut value = serde_json::json!({
                    "line": part.start.line,
                    "offset": part.start.offset,
                });
                let object = value.as_object_mut().expect("an object");
                match std::str::from_utf8(&part.data) {
                    Ok(text) => object.insert("text".into(), text.into()),
                    Err(_) => {
                        use base64::Engine;
                        let data = base64::engine::general_purpose::STANDARD.encode(&part.data);
                        object.insert("base64".into(), data.into())
                    }
                };
                value
            })
            .collect();
        let mut value = serde_json::to_value(&summary).unwrap_or_default();
        value["parts"] = parts.into();
        stdout::outln!("{value}")?;
    } else {
        match &grep {
            Some((regex, context)) => stdout::write_all(&numbered(&parts, regex, *context))?,
            None => {
                for part in &parts {
                    stdout::write_all(&part.data)?;
                }
            }
        }
        eprintln!("{}", summary.line());
    }
    Ok(if matched {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
