//! rust_constrained - constrained parameters and structured output:
//! `rust_constrained_pad` declares a pattern, length bounds, a range and
//! an enum (the host refuses a call that breaks one before the tool runs,
//! naming the parameter), checks one more rule of its own before it runs
//! (validate), and writes JSON that matches its output schema (the host
//! checks it when the call ends).
use serde::{Deserialize, Serialize};
use toolhost::{Call, Params, ToolResult};

#[derive(Params, Deserialize)]
struct PadArgs {
    /// The word to pad: lowercase letters.
    #[param(pattern = "^[a-z]+$", min_length = 1, max_length = 32)]
    word: String,
    /// The width to pad the word to.
    #[param(minimum = 1, maximum = 80, default = 10)]
    width: u32,
    /// Where the word goes in the padded text.
    #[param(enum_values = ["left", "right", "center"], default = "left")]
    align: String,
    /// The padding character (one).
    #[param(min_length = 1, max_length = 1)]
    fill: Option<String>,
}

#[derive(Serialize)]
struct Padded {
    text: String,
    width: u32,
    padding: u32,
}

// What the parameter table cannot say, checked before the tool runs (the
// host's validate_args): the answer would be ambiguous with a letter.
fn fill_not_a_letter(a: &PadArgs) -> Result<(), String> {
    match a.fill.as_deref() {
        Some(f) if f.chars().any(char::is_alphabetic) => {
            Err(format!("'fill' must not be a letter, got '{}'", f))
        }
        _ => Ok(()),
    }
}

/// Pads a lowercase word to a width, aligned left, right or center.
///
/// The result is one JSON object: the padded text, its width and how many
/// fill characters were added (0 when the word is as wide already).
#[toolhost::tool(
    title = "Pad a word",
    flags = READ_ONLY | IDEMPOTENT | SHORT,
    validate = fill_not_a_letter,
    tags = ["text", "read-only"],
    output_schema = r#"{"type": "object",
        "properties": {"text": {"type": "string"},
                       "width": {"type": "integer", "minimum": 1},
                       "padding": {"type": "integer", "minimum": 0}},
        "required": ["text", "width", "padding"],
        "additionalProperties": false}"#
)]
fn rust_constrained_pad(call: Call, a: PadArgs) -> ToolResult {
    let fill = a.fill.as_deref().and_then(|f| f.chars().next()).unwrap_or(' ');
    let len = a.word.chars().count() as u32;
    let padding = a.width.saturating_sub(len);
    let (l, r) = match a.align.as_str() {
        "right" => (padding, 0),
        "center" => (padding / 2, padding - padding / 2),
        _ => (0, padding),
    };
    let rep = |n: u32| std::iter::repeat(fill).take(n as usize).collect::<String>();
    let text = format!("{}{}{}", rep(l), a.word, rep(r));
    call.write_json(&Padded { width: len.max(a.width), text, padding })
}

toolhost::plugin!(tools = [rust_constrained_pad]);
