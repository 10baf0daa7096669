//! The driver's layers, kept true: each top-level module of daisy-driver
//! may use the modules below it in [`LAYERS`], never one above, and no
//! import circle joins more than two files.
//!
//! It reads the source as text: every `crate::…` path (in `use` lines and
//! inline) and every `super::…` path, resolved against the file's own
//! module, because the layers are a property of the code, not of a build.
//! Test code (`tests.rs`, `tests/`, and what follows `#[cfg(test)]` in a
//! file) may reach across layers to build fixtures, so it is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The driver's top-level modules by layer, highest first: a module may
/// use its own layer and those after it. `main` and `lib` are entry
/// points above all of them; the last layer is small helpers.
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["inspect"],
    &["run"],
    &["run_dir"],
    &["pipeline"],
    &["counted", "exit", "throttle"],
];

/// One `crate::` path written in a file, resolved to module segments.
struct Import {
    file: PathBuf,
    line: usize,
    text: String,
    path: Vec<String>,
}

#[test]
fn each_layer_uses_only_layers_below_it() {
    // A set: `use a::{b, c}` is one upward import, said once.
    let upward: BTreeSet<String> = imports()
        .iter()
        .filter_map(|import| {
            let from = layer_of(&module_of(&import.file))?;
            let to = layer_of(&import.path)?;
            (to < from).then(|| {
                format!(
                    "src/{}:{}: {} uses {}, a layer above it: {}",
                    import.file.display(),
                    import.line,
                    module_of(&import.file)[0],
                    layer_name(to),
                    import.text.trim()
                )
            })
        })
        .collect();
    assert!(
        upward.is_empty(),
        "layers are {} (each may use only those after it); upward imports:\n{}",
        (0..LAYERS.len())
            .map(layer_name)
            .collect::<Vec<_>>()
            .join(" → "),
        upward.into_iter().collect::<Vec<_>>().join("\n")
    );
}

#[test]
fn no_import_circle_joins_more_than_two_files() {
    let files = source_files();
    let mut graph: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for import in imports() {
        if let Some(target) = file_of(&import.path, &files) {
            if target != import.file && !is_parent_module(&target, &import.file) {
                graph.entry(import.file).or_default().insert(target);
            }
        }
    }
    let circles: Vec<String> = strongly_connected(&graph)
        .into_iter()
        .filter(|files| files.len() > 2)
        .map(|files| {
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            format!("{} files: {}", names.len(), names.join(", "))
        })
        .collect();
    assert!(
        circles.is_empty(),
        "files joined by import circles, more than two at a time:\n{}",
        circles.join("\n")
    );
}

/// Whether `module_file` is the `mod.rs` of a folder `file` is in: a
/// module's children take what it declares for them all (`super::X`),
/// which the language ties in both directions, so such an arrow is not
/// counted in a circle.
fn is_parent_module(module_file: &Path, file: &Path) -> bool {
    module_file.ends_with("mod.rs")
        && module_file
            .parent()
            .is_some_and(|folder| file.starts_with(folder))
}

/// The index of the layer a module path belongs to, if it is in one.
fn layer_of(module: &[String]) -> Option<usize> {
    let top = module.first()?;
    LAYERS
        .iter()
        .position(|layer| layer.contains(&top.as_str()))
}

/// A layer as the failure message names it.
fn layer_name(index: usize) -> String {
    LAYERS[index].join(", ")
}

fn source_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every non-test `.rs` file under src/, relative to it.
fn source_files() -> BTreeSet<PathBuf> {
    let mut files = BTreeSet::new();
    let mut dirs = vec![source_root()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("read a source directory") {
            let path = entry.expect("a directory entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if name != "tests" {
                    dirs.push(path);
                }
            } else if name.ends_with(".rs") && name != "tests.rs" {
                let relative = path.strip_prefix(source_root()).expect("under src/");
                files.insert(relative.to_path_buf());
            }
        }
    }
    files
}

/// The module a file (relative to src/) defines: `run/budget.rs` is
/// `run::budget`, `run/mod.rs` is `run`, `lib.rs` and `main.rs` the root.
fn module_of(file: &Path) -> Vec<String> {
    let mut segments: Vec<String> = file
        .with_extension("")
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    if matches!(
        segments.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        segments.pop();
    }
    segments
}

/// The file a path leads to: that of its longest leading module (where
/// the name is declared or passed on with `pub use`).
fn file_of(path: &[String], files: &BTreeSet<PathBuf>) -> Option<PathBuf> {
    (1..=path.len())
        .rev()
        .find_map(|len| module_file(&path[..len], files))
}

/// The file that defines exactly this module, if it is one of `files`.
fn module_file(module: &[String], files: &BTreeSet<PathBuf>) -> Option<PathBuf> {
    let module = module.join("/");
    [format!("{module}.rs"), format!("{module}/mod.rs")]
        .into_iter()
        .map(PathBuf::from)
        .find(|candidate| files.contains(candidate))
}

fn is_module(module: &[String], files: &BTreeSet<PathBuf>) -> bool {
    module_file(module, files).is_some()
}

/// Every `crate::` and `super::` path in the non-test code of every file.
fn imports() -> Vec<Import> {
    let files = source_files();
    let mut found = Vec::new();
    for file in &files {
        let text = fs::read_to_string(source_root().join(file)).expect("read a source file");
        let module = module_of(file);
        for (index, statement) in statements(&text) {
            for code in expand_group(&statement) {
                for path in paths_in(&code, &module, &files) {
                    found.push(Import {
                        file: file.clone(),
                        line: index + 1,
                        text: statement.clone(),
                        path,
                    });
                }
            }
        }
    }
    found
}

/// A file's lines with their indices, up to an inline `#[cfg(test)] mod
/// … {` (test modules close a file); `#[cfg(test)]` items elsewhere count.
fn non_test_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|pair| {
            pair[0].trim() == "#[cfg(test)]"
                && pair[1].contains("mod ")
                && pair[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len());
    lines.into_iter().enumerate().take(end)
}

/// The non-test code of a file without comments, a line at a time but a
/// `use` statement whole, with the index of its first line.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut statements: Vec<(usize, String)> = Vec::new();
    let mut open_use = false;
    for (index, line) in non_test_lines(text) {
        let code = line.split("//").next().unwrap_or("").trim();
        match statements.last_mut() {
            Some((_, statement)) if open_use => statement.push_str(code),
            _ => statements.push((index, code.to_string())),
        }
        let starts_use = code.starts_with("use ") || code.contains(" use ");
        open_use = (open_use || starts_use) && !code.ends_with(';');
    }
    statements
}

/// `use a::{b, c::d};` as `a::b` and `a::c::d` (one level of braces, the
/// way the driver writes them); any other code as it is.
fn expand_group(code: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (code.find("::{"), code.rfind('}')) else {
        return vec![code.to_string()];
    };
    let prefix = &code[..open];
    code[open + 3..close]
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .map(|item| match item {
            "self" => prefix.to_string(),
            item => format!("{prefix}::{item}"),
        })
        .collect()
}

/// The module paths a line of code names: `crate::…`, `self::…`,
/// `super::…`, and `child::…` where `child` is a submodule of the file's
/// own module (other paths lead out of the crate).
fn paths_in(code: &str, module: &[String], files: &BTreeSet<PathBuf>) -> Vec<Vec<String>> {
    let is_path_char = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut paths = Vec::new();
    for (start, _) in code.match_indices("::") {
        let head_start = code[..start]
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        if code[..head_start].chars().last().is_some_and(is_path_char) {
            continue;
        }
        let segments: Vec<&str> = code[head_start..]
            .split(|c: char| !is_path_char(c))
            .next()
            .unwrap_or("")
            .split("::")
            .filter(|s| !s.is_empty())
            .collect();
        paths.extend(resolve(&segments, module, files));
    }
    paths
}

/// The absolute module path of `segments` written in `module` (a
/// `mod.rs` is its folder's module, so its `super` is the folder's
/// parent, as for any other file); `None` for a path out of the crate.
fn resolve(segments: &[&str], module: &[String], files: &BTreeSet<PathBuf>) -> Option<Vec<String>> {
    let (mut base, rest) = match *segments.first()? {
        "crate" => (Vec::new(), &segments[1..]),
        "self" => (module.to_vec(), &segments[1..]),
        "super" => (module.to_vec(), segments),
        child if is_module(&[module, &[child.to_string()]].concat(), files) => {
            (module.to_vec(), segments)
        }
        _ => return None,
    };
    let supers = rest.iter().take_while(|s| **s == "super").count();
    base.truncate(base.len().saturating_sub(supers));
    base.extend(rest[supers..].iter().map(|s| s.to_string()));
    Some(base)
}

/// Tarjan's strongly connected components of a file graph.
fn strongly_connected(graph: &BTreeMap<PathBuf, BTreeSet<PathBuf>>) -> Vec<Vec<PathBuf>> {
    struct State<'g> {
        graph: &'g BTreeMap<PathBuf, BTreeSet<PathBuf>>,
        index: BTreeMap<&'g PathBuf, usize>,
        low: BTreeMap<&'g PathBuf, usize>,
        stack: Vec<&'g PathBuf>,
        on_stack: BTreeSet<&'g PathBuf>,
        components: Vec<Vec<PathBuf>>,
    }
    fn visit<'g>(state: &mut State<'g>, node: &'g PathBuf) {
        let next = state.index.len();
        state.index.insert(node, next);
        state.low.insert(node, next);
        state.stack.push(node);
        state.on_stack.insert(node);
        for target in state.graph.get(node).into_iter().flatten() {
            if !state.index.contains_key(target) {
                visit(state, target);
                let low = state.low[node].min(state.low[target]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(target) {
                let low = state.low[node].min(state.index[target]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.clone());
                if member == node {
                    break;
                }
            }
            state.components.push(component);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        components: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.components
}
