//! `{placeholder}` substitution in block command arguments.
//!
//! Arguments are parsed once, when the command is built, so a typo such as
//! `{blok_id}` fails when the pipeline starts, not on every block. `{{`
//! and `}}` stand for literal braces. It lives here, not in the worker,
//! because the driver checks a pipeline's block commands with the same
//! parser the worker fills them in with.

use crate::protocol::WireBlock;
use std::iter::Peekable;
use std::str::Chars;

/// A block command that cannot be built: the pipeline is wrong, so nothing
/// should run until it is fixed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("the block command is empty")]
    Empty,
    #[error("unknown placeholder {{{name}}} in argument {argument:?}; known: {known}; write {{{{ or }}}} for a literal brace", known = known())]
    UnknownPlaceholder { argument: String, name: String },
    #[error("unmatched brace in argument {argument:?}; write {{{{ or }}}} for a literal brace")]
    UnmatchedBrace { argument: String },
}

/// What a placeholder stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    TaskId,
    BlockId,
    ReadOffset,
    ReadShape,
    WriteOffset,
    WriteShape,
}

impl Field {
    const ALL: [Field; 6] = [
        Field::TaskId,
        Field::BlockId,
        Field::ReadOffset,
        Field::ReadShape,
        Field::WriteOffset,
        Field::WriteShape,
    ];

    fn name(self) -> &'static str {
        match self {
            Field::TaskId => "task_id",
            Field::BlockId => "block_id",
            Field::ReadOffset => "read_offset",
            Field::ReadShape => "read_shape",
            Field::WriteOffset => "write_offset",
            Field::WriteShape => "write_shape",
        }
    }

    /// Coordinates are comma-separated (`0,64,128`): one shell word, easy
    /// to split in any language.
    fn render(self, block: &WireBlock) -> String {
        let join = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        match self {
            Field::TaskId => block.task_id.clone(),
            Field::BlockId => block.block_id.to_string(),
            Field::ReadOffset => join(&block.read_roi.offset),
            Field::ReadShape => join(&block.read_roi.shape),
            Field::WriteOffset => join(&block.write_roi.offset),
            Field::WriteShape => join(&block.write_roi.shape),
        }
    }
}

fn known() -> String {
    let names: Vec<String> = Field::ALL
        .iter()
        .map(|f| format!("{{{}}}", f.name()))
        .collect();
    names.join(", ")
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(Field),
}

/// A whole command line, each argument parsed: one that parses is one the
/// worker can fill in for any block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandTemplate {
    argv: Vec<ArgTemplate>,
}

impl CommandTemplate {
    /// Checks every argument's placeholders, so that a typo fails before
    /// any block runs.
    pub fn parse(argv: &[impl AsRef<str>]) -> Result<Self, CommandError> {
        if argv.is_empty() {
            return Err(CommandError::Empty);
        }
        let argv = argv
            .iter()
            .map(|a| ArgTemplate::parse(a.as_ref()))
            .collect::<Result<_, _>>()?;
        Ok(Self { argv })
    }

    /// The program, unless a placeholder makes it differ per block.
    pub fn program(&self) -> Option<&str> {
        self.argv[0].literal()
    }

    /// The command line for `block`; never empty.
    pub fn render(&self, block: &WireBlock) -> Vec<String> {
        self.argv.iter().map(|a| a.render(block)).collect()
    }
}

/// One argument, split into literal text and placeholders.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ArgTemplate {
    pieces: Vec<Piece>,
}

impl ArgTemplate {
    fn parse(argument: &str) -> Result<Self, CommandError> {
        let unmatched = || CommandError::UnmatchedBrace {
            argument: argument.to_string(),
        };
        let mut pieces = Vec::new();
        let mut text = String::new();
        let mut chars = argument.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('{', Some('{')) | ('}', Some('}')) => {
                    chars.next();
                    text.push(c);
                }
                ('{', _) => {
                    let name = take_name(&mut chars).ok_or_else(unmatched)?;
                    pieces
                        .extend((!text.is_empty()).then(|| Piece::Text(std::mem::take(&mut text))));
                    pieces.push(Piece::Field(lookup(argument, &name)?));
                }
                ('}', _) => return Err(unmatched()),
                _ => text.push(c),
            }
        }
        pieces.extend((!text.is_empty()).then_some(Piece::Text(text)));
        Ok(Self { pieces })
    }

    /// The argument as it is, if it has no placeholder.
    fn literal(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [] => Some(""),
            [Piece::Text(text)] => Some(text),
            _ => None,
        }
    }

    fn render(&self, block: &WireBlock) -> String {
        let render = |piece: &Piece| match piece {
            Piece::Text(text) => text.clone(),
            Piece::Field(field) => field.render(block),
        };
        self.pieces.iter().map(render).collect()
    }
}

/// The name up to the closing brace, or `None` if there is none (or
/// another `{` comes first).
fn take_name(chars: &mut Peekable<Chars>) -> Option<String> {
    let mut name = String::new();
    for c in chars.by_ref() {
        match c {
            '}' => return Some(name),
            '{' => return None,
            _ => name.push(c),
        }
    }
    None
}

fn lookup(argument: &str, name: &str) -> Result<Field, CommandError> {
    Field::ALL
        .into_iter()
        .find(|f| f.name() == name)
        .ok_or_else(|| CommandError::UnknownPlaceholder {
            argument: argument.to_string(),
            name: name.to_string(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::WireRoi;

    fn block(id: u64) -> WireBlock {
        let roi = |offset: [i64; 3], shape: [i64; 3]| WireRoi {
            offset: offset.to_vec(),
            shape: shape.to_vec(),
        };
        WireBlock {
            task_id: "predict".into(),
            block_id: id,
            read_roi: roi([0, 64, 128], [32, 32, 32]),
            write_roi: roi([8, 72, 136], [16, 16, 16]),
        }
    }

    fn render(argument: &str) -> String {
        ArgTemplate::parse(argument).unwrap().render(&block(17))
    }

    #[test]
    fn every_placeholder_renders() {
        assert_eq!(render("{task_id}/{block_id}"), "predict/17");
        assert_eq!(
            render("r={read_offset}+{read_shape}"),
            "r=0,64,128+32,32,32"
        );
        assert_eq!(
            render("w={write_offset}+{write_shape}"),
            "w=8,72,136+16,16,16"
        );
    }

    #[test]
    fn double_braces_are_literal() {
        assert_eq!(render("{{x}} {{{block_id}}} }}{{"), "{x} {17} }{");
        assert_eq!(render("plain"), "plain");
    }

    #[test]
    fn an_unknown_placeholder_names_itself_and_the_known_ones() {
        let err = ArgTemplate::parse("out/{blok_id}.zarr").unwrap_err();
        let message = err.to_string();
        assert!(message.contains("{blok_id}"), "{message}");
        assert!(message.contains("\"out/{blok_id}.zarr\""), "{message}");
        assert!(message.contains("{block_id}, {read_offset}"), "{message}");
    }

    #[test]
    fn unmatched_braces_are_refused() {
        for argument in ["{block_id", "block_id}", "{a{b}", "{"] {
            let err = ArgTemplate::parse(argument).unwrap_err();
            assert_eq!(
                err,
                CommandError::UnmatchedBrace {
                    argument: argument.into()
                }
            );
        }
    }

    #[test]
    fn a_command_is_checked_whole_and_knows_its_program() {
        let empty: [&str; 0] = [];
        assert_eq!(CommandTemplate::parse(&empty), Err(CommandError::Empty));
        let err = CommandTemplate::parse(&["predict", "{blok_id}"]).unwrap_err();
        assert!(matches!(&err, CommandError::UnknownPlaceholder { name, .. } if name == "blok_id"));
        let command = CommandTemplate::parse(&["predict", "{block_id}"]).unwrap();
        assert_eq!(command.program(), Some("predict"));
        assert_eq!(command.render(&block(3)), ["predict", "3"]);
        let per_block = CommandTemplate::parse(&["run-{task_id}"]).unwrap();
        assert_eq!(per_block.program(), None);
    }
}
