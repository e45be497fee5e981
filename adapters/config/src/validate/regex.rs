//! Checks regular expressions against RE2, the syntax of Envoy's `safe_regex`.
//!
//! `regex-syntax` parses a superset of RE2 minus a few rarities, so a pattern is parsed with it
//! and then searched for the constructs it accepts but RE2 does not (or reads differently):
//! nested classes and class set operations, `\<` `\>` and `\b{…}` assertions, the `u`, `x` and
//! `R` flags, and repetition counts above RE2's limit of 1000. Look-around and backreferences
//! are already parse errors. Patterns RE2 accepts but `regex-syntax` does not (`\Q…\E`, octal
//! escapes) are refused, which is rare and errs on the side of a clear message over a NACK.

use regex_syntax::ast::{self, Ast, ClassSetBinaryOp, ClassSetItem, Flag, FlagsItemKind, Visitor};
use regex_syntax::hir::translate::Translator;

/// Istio refuses longer patterns: RE2's program size, which Envoy limits, grows with length.
const MAX_LEN: usize = 1024;
/// RE2's largest repetition count.
const MAX_REPEAT: u32 = 1000;

/// Checks that `pattern` is a non-empty RE2 regular expression Envoy will accept.
pub(super) fn check_re2(pattern: &str) -> Result<(), String> {
    if pattern.is_empty() {
        return Err("the regular expression is empty".into());
    }
    if pattern.len() > MAX_LEN {
        return Err(format!(
            "the regular expression is longer than {MAX_LEN} characters"
        ));
    }
    let invalid =
        |what: String| format!("{pattern:?} is not a valid RE2 regular expression: {what}");
    let ast = ast::parse::Parser::new().parse(pattern).map_err(|e| {
        invalid(format!(
            "{} (at offset {})",
            e.kind(),
            e.span().start.offset
        ))
    })?;
    ast::visit(&ast, Re2Only).map_err(invalid)?;
    Translator::new().translate(pattern, &ast).map_err(|e| {
        invalid(format!(
            "{} (at offset {})",
            e.kind(),
            e.span().start.offset
        ))
    })?;
    Ok(())
}

/// Finds what RE2 lacks in an AST that `regex-syntax` accepted.
struct Re2Only;

impl Visitor for Re2Only {
    type Output = ();
    type Err = String;

    fn finish(self) -> Result<(), String> {
        Ok(())
    }

    fn visit_pre(&mut self, ast: &Ast) -> Result<(), String> {
        match ast {
            Ast::Assertion(a) => match a.kind {
                ast::AssertionKind::WordBoundaryStart
                | ast::AssertionKind::WordBoundaryEnd
                | ast::AssertionKind::WordBoundaryStartAngle
                | ast::AssertionKind::WordBoundaryEndAngle
                | ast::AssertionKind::WordBoundaryStartHalf
                | ast::AssertionKind::WordBoundaryEndHalf => {
                    Err("RE2 has no \\<, \\> or \\b{...} assertions; use \\b".into())
                }
                _ => Ok(()),
            },
            Ast::Flags(set) => check_flags(&set.flags),
            Ast::Group(group) => match &group.kind {
                ast::GroupKind::NonCapturing(flags) => check_flags(flags),
                _ => Ok(()),
            },
            Ast::Repetition(rep) => match rep.op.kind {
                ast::RepetitionKind::Range(
                    ast::RepetitionRange::Exactly(n)
                    | ast::RepetitionRange::AtLeast(n)
                    | ast::RepetitionRange::Bounded(_, n),
                ) if n > MAX_REPEAT => Err(format!(
                    "repetition count {n} is above RE2's limit of {MAX_REPEAT}"
                )),
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }

    fn visit_class_set_item_pre(&mut self, item: &ClassSetItem) -> Result<(), String> {
        match item {
            ClassSetItem::Bracketed(_) => Err(
                "RE2 has no nested character classes: '[' inside a class is a literal there, \
                 so escape it as \\["
                    .into(),
            ),
            _ => Ok(()),
        }
    }

    fn visit_class_set_binary_op_pre(&mut self, _op: &ClassSetBinaryOp) -> Result<(), String> {
        Err(
            "RE2 has no class set operations (&&, --, ~~): they are literal characters there, \
             so escape them"
                .into(),
        )
    }
}

fn check_flags(flags: &ast::Flags) -> Result<(), String> {
    for item in &flags.items {
        let letter = match item.kind {
            FlagsItemKind::Flag(Flag::Unicode) => 'u',
            FlagsItemKind::Flag(Flag::CRLF) => 'R',
            FlagsItemKind::Flag(Flag::IgnoreWhitespace) => 'x',
            _ => continue,
        };
        return Err(format!(
            "RE2 knows only the flags i, m, s and U, not {letter}"
        ));
    }
    Ok(())
}
