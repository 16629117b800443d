//! forward()'s signature of a TorchScript module (`torch.jit.save`'s `.pt`
//! archive), read without libtorch: what `gen-config` names a PyTorch
//! model's inputs and outputs after.
//!
//! The archive is a zip whose entries all sit under one folder, the
//! "archive name" (the first entry's name up to `/`, as libtorch takes it;
//! not the file's stem, since renaming the file does not change it):
//! - `<prefix>/data.pkl` pickles the module object. Torch's own pickler
//!   writes protocol 2, and the first opcode after `PROTO 2` is the `GLOBAL`
//!   of the root module's class: `\x80\x02c` + `MODULE\n` + `CLASS\n`, e.g.
//!   `__torch__\nAddSub\n` or `__torch__.pkg.model\nNet\n`. Only those bytes
//!   are read; no unpickler is needed.
//! - `<prefix>/code/MODULE-with-dots-as-slashes.py` holds the class's
//!   TorchScript source as torch's python_print writes it: `class CLASS(Module):`
//!   at column 0, a 2-space indented body, and in it the canonical
//!   `  def forward(self: MODULE.CLASS,` with each further argument on its
//!   own line as `name: Type` or `name: Type=default`, the last closing with
//!   `) -> Type:`. Every argument is annotated (an unannotated one is
//!   printed as `Tensor`).
//!
//! The signature gives the arguments' names and kinds (`Tensor`, `List[str]`,
//! `Dict[str, Tensor]`, ...) and how many values come back, but not a
//! tensor's data type or shape: TorchScript does not record them.

use std::io::{Read, Seek};
use std::path::Path;

use crate::core::error::{os_reason, Error, Result};

/// One argument of forward(), as printed in the archive's code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argument {
    pub name: String,
    /// The type as printed: `Tensor`, `List[str]`, `Dict[str, Tensor]`,
    /// `Optional[Tensor]`, ...
    pub ty: String,
    /// The default value's source text (`None`, `3`, `"x,y"`), if any.
    pub default: Option<String>,
}

/// The root module's forward() signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    /// The root module's qualified class name, e.g. `__torch__.AddSub`.
    pub class: String,
    /// The arguments without `self`.
    pub args: Vec<Argument>,
    /// The return annotation, e.g. `Tuple[Tensor, Tensor]`.
    pub returns: String,
}

impl Signature {
    /// How many values forward() returns when the annotation says:
    /// `Tuple[A, B, C]` -> 3; `Tensor`, `List[str]` -> 1; `NoneType` -> 0;
    /// `List[Tensor]` (the count is only known at run time) -> None.
    pub fn return_count(&self) -> Option<usize> {
        self.return_types().map(|types| types.len())
    }

    /// The types of the values forward() returns, one per value, when
    /// their count is known (see `return_count`).
    pub fn return_types(&self) -> Option<Vec<String>> {
        let ret = self.returns.trim();
        if ret == "NoneType" || ret == "Tuple[()]" {
            return Some(Vec::new());
        }
        if let Some(inner) = generic_inner(ret, "Tuple") {
            return Some(split_top_level(inner).map(|t| t.to_string()).collect());
        }
        if ret != "List[str]" && generic_inner(ret, "List").is_some() {
            return None;
        }
        Some(vec![ret.to_string()])
    }
}

/// Largest `data.pkl` prefix looked at (the GLOBAL comes right after PROTO).
const PICKLE_HEAD: u64 = 4096;
/// Largest code file read; python_print'ed classes are far smaller.
const CODE_LIMIT: u64 = 64 << 20;

/// Reads the root module's forward() signature from the TorchScript archive
/// at `path`. Errors: NotFound (no file), InvalidArg (not a TorchScript
/// archive: libtorch would not load it either), Unsupported (an archive
/// whose forward() this reader cannot make out).
pub fn forward_signature(path: &Path) -> Result<Signature> {
    let file = std::fs::File::open(path).map_err(|e| {
        let why = format!("{}: cannot open: {}", path.display(), os_reason(&e));
        match e.kind() {
            std::io::ErrorKind::NotFound => Error::not_found(why),
            _ => Error::invalid_arg(why),
        }
    })?;
    read_signature(std::io::BufReader::new(file), path)
}

/// `forward_signature` of the archive `reader` reads (`path` names it).
fn read_signature<R: Read + Seek>(reader: R, path: &Path) -> Result<Signature> {
    let fail = |why: String| Error::invalid_arg(format!("{}: {why}", path.display()));
    let mut zip = zip::ZipArchive::new(reader)
        .map_err(|e| fail(format!("not a TorchScript archive (not a zip file: {e})")))?;
    let first = zip
        .by_index_raw(0)
        .map(|f| f.name().to_string())
        .map_err(|_| fail("not a TorchScript archive (an empty zip file)".into()))?;
    let prefix = match first.split_once('/') {
        Some((prefix, _)) if !prefix.is_empty() => prefix.to_string(),
        _ => {
            return Err(fail(format!(
                "not a TorchScript archive (entry '{first}' is not in a folder)"
            )))
        }
    };

    let pickle_name = format!("{prefix}/data.pkl");
    let head = read_entry(&mut zip, &pickle_name, PICKLE_HEAD)
        .map_err(|why| fail(format!("not a TorchScript archive ({why})")))?;
    let (module, class) = root_global(&head).ok_or_else(|| {
        fail(format!(
            "not a TorchScript archive ({pickle_name} does not start with a \
             TorchScript module's class)"
        ))
    })?;

    // Past this point the file is a TorchScript archive whose signature
    // this reader cannot make out: Unsupported, not InvalidArg, so callers
    // can tell it from a file that is no model at all.
    let unread = |why: String| Error::unsupported(format!("{}: {why}", path.display()));
    let code_name = format!("{prefix}/code/{}.py", module.replace('.', "/"));
    let code = read_entry(&mut zip, &code_name, CODE_LIMIT)
        .and_then(|bytes| {
            String::from_utf8(bytes).map_err(|_| format!("{code_name} is not UTF-8 text"))
        })
        .map_err(|why| unread(format!("unreadable code file: {why}")))?;
    let qualified = format!("{module}.{class}");
    let (args, returns) = class_forward(&code, &class)
        .map_err(|why| unread(format!("{qualified} in {code_name}: {why}")))?;
    Ok(Signature {
        class: qualified,
        args,
        returns,
    })
}

/// Up to `limit` bytes of the entry `name`; the error says what went wrong.
fn read_entry<R: Read + Seek>(
    zip: &mut zip::ZipArchive<R>,
    name: &str,
    limit: u64,
) -> std::result::Result<Vec<u8>, String> {
    let entry = match zip.by_name(name) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => return Err(format!("no {name}")),
        Err(e) => return Err(format!("cannot read {name}: {e}")),
    };
    let mut bytes = Vec::new();
    entry
        .take(limit)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {name}: {e}"))?;
    Ok(bytes)
}

/// MODULE and CLASS of the GLOBAL opcode right after `PROTO 2`.
fn root_global(pickle: &[u8]) -> Option<(String, String)> {
    let rest = pickle.strip_prefix(b"\x80\x02c")?;
    let mut lines = rest.splitn(3, |&b| b == b'\n');
    let module = std::str::from_utf8(lines.next()?).ok()?;
    let class = std::str::from_utf8(lines.next()?).ok()?;
    lines.next()?; // the CLASS line was terminated
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let module_ok = module == "__torch__"
        || module
            .strip_prefix("__torch__.")
            .is_some_and(|m| m.split('.').all(ident));
    (module_ok && ident(class)).then(|| (module.to_string(), class.to_string()))
}

/// forward()'s arguments (without `self`) and return type, from the code
/// of class `class` in a python_print'ed file.
fn class_forward(code: &str, class: &str) -> std::result::Result<(Vec<Argument>, String), String> {
    let header = format!("class {class}(");
    let mut lines = code.lines().skip_while(|l| !l.starts_with(&header));
    if lines.next().is_none() {
        return Err(format!("no class {class}"));
    }
    // The body: up to the next line at column 0.
    let body: Vec<&str> = lines
        .take_while(|l| l.is_empty() || l.starts_with(char::is_whitespace))
        .collect();
    let start = body
        .iter()
        .position(|l| l.starts_with("  def forward(self"))
        .ok_or_else(|| "no forward method".to_string())?;
    parse_def(&body[start..].join("\n"))
}

/// Parses `def forward(ARGS) -> RET:` (spanning lines) at the start of
/// `text` (leading blanks allowed); `self` is dropped from the arguments.
fn parse_def(text: &str) -> std::result::Result<(Vec<Argument>, String), String> {
    let bad = |what: &str| format!("cannot parse forward()'s signature: {what}");
    let rest = text
        .trim_start()
        .strip_prefix("def forward(")
        .ok_or_else(|| bad("no 'def forward('"))?;
    let close = find_top_level(rest, ')').ok_or_else(|| bad("no closing ')'"))?;
    let mut args = Vec::new();
    for piece in split_top_level(&rest[..close]) {
        let (name, ty) = piece
            .split_once(':')
            .ok_or_else(|| bad(&format!("argument '{piece}' has no type")))?;
        let (ty, default) = match ty.split_once('=') {
            Some((ty, default)) => (ty, Some(default.trim().to_string())),
            None => (ty, None),
        };
        args.push(Argument {
            name: name.trim().to_string(),
            ty: ty.trim().to_string(),
            default,
        });
    }
    if args.first().is_some_and(|a| a.name == "self") {
        args.remove(0);
    }
    let after = rest[close + 1..].trim_start();
    let ret = after
        .strip_prefix("->")
        .ok_or_else(|| bad("no return type"))?;
    let colon = find_top_level(ret, ':').ok_or_else(|| bad("no ':' after the return type"))?;
    let returns = ret[..colon].trim();
    if returns.is_empty() {
        return Err(bad("no return type"));
    }
    Ok((args, returns.to_string()))
}

/// `Name[INNER]` -> INNER.
fn generic_inner<'a>(ty: &'a str, name: &str) -> Option<&'a str> {
    ty.strip_prefix(name)?.strip_prefix('[')?.strip_suffix(']')
}

/// The byte offset of the first `target` outside brackets and quotes; a
/// closing bracket that closes nothing opened in `text` counts as outside.
fn find_top_level(text: &str, target: char) -> Option<usize> {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (at, c) in text.char_indices() {
        if let Some(q) = quote {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                _ if c == q => quote = None,
                _ => {}
            }
            continue;
        }
        if depth == 0 && c == target {
            return Some(at);
        }
        match c {
            '"' | '\'' => quote = Some(c),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    None
}

/// `text` split at its top-level commas, each piece trimmed; empty pieces
/// (a trailing comma, an empty list) are dropped.
fn split_top_level(mut text: &str) -> impl Iterator<Item = &str> {
    std::iter::from_fn(move || loop {
        if text.is_empty() {
            return None;
        }
        let end = find_top_level(text, ',').unwrap_or(text.len());
        let piece = text[..end].trim();
        text = text.get(end + 1..).unwrap_or("");
        if !piece.is_empty() {
            return Some(piece);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/pytorch")
            .join(name)
    }

    fn arg(name: &str, ty: &str) -> Argument {
        Argument {
            name: name.into(),
            ty: ty.into(),
            default: None,
        }
    }

    fn sig(args: &[(&str, &str)], returns: &str) -> (Vec<Argument>, String) {
        (
            args.iter().map(|(n, t)| arg(n, t)).collect(),
            returns.to_string(),
        )
    }

    #[test]
    fn reads_every_fixture() {
        let mut seen = 0;
        let mut check = |file: &str, class: &str, args: &[(&str, &str)], returns: &str| {
            let got = forward_signature(&fixture(file)).unwrap();
            let (args, returns) = sig(args, returns);
            let class = format!("__torch__.{class}");
            assert_eq!(
                got,
                Signature {
                    class,
                    args,
                    returns
                },
                "{file}"
            );
            seen += 1;
            got.return_count()
        };
        let two = [("INPUT0", "Tensor"), ("INPUT1", "Tensor")];
        let x = [("x", "Tensor")];
        let strings = [("x", "List[str]")];
        let pair = "Tuple[Tensor, Tensor]";
        assert_eq!(check("add_sub.pt", "AddSub", &two, pair), Some(2));
        assert_eq!(check("identity.pt", "Identity", &x, "Tensor"), Some(1));
        assert_eq!(check("list_out.pt", "ListOut", &x, "List[Tensor]"), None);
        let dict = [("inputs", "Dict[str, Tensor]")];
        assert_eq!(check("dict_in.pt", "DictIn", &dict, "Tensor"), Some(1));
        assert_eq!(
            check("strings.pt", "Strings", &strings, "List[str]"),
            Some(1)
        );
        assert_eq!(
            check("string_len.pt", "StringLen", &strings, "Tensor"),
            Some(1)
        );
        let acc = [
            ("INPUT__0", "Tensor"),
            ("START__1", "Tensor"),
            ("INPUT_STATE__2", "Tensor"),
        ];
        assert_eq!(check("accumulator.pt", "Accumulator", &acc, pair), Some(2));
        assert_eq!(check("fail.pt", "Fail", &x, "Tensor"), Some(1));
        // Every fixture is covered.
        let pts = std::fs::read_dir(fixture(""))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "pt")
            })
            .count();
        assert_eq!(pts, seen);
    }

    #[test]
    fn reads_a_traced_module_in_a_package() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("examples/model_repository/efficientnet_lite0_pt/1/model.pt");
        let got = forward_signature(&path).unwrap();
        assert_eq!(
            got.class,
            "__torch__.efficientnet_lite_pytorch.model.EfficientNet"
        );
        assert_eq!(got.args, [arg("inputs", "Tensor")]);
        assert_eq!(got.returns, "Tensor");
        assert_eq!(got.return_count(), Some(1));
    }

    #[test]
    fn refuses_what_is_not_a_torchscript_archive() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("model.pt");
        std::fs::write(&text, "not a zip at all").unwrap();
        let e = forward_signature(&text).unwrap_err();
        assert!(
            e.message
                .contains("model.pt: not a TorchScript archive (not a zip"),
            "{e}"
        );

        let empty = dir.path().join("empty.pt");
        std::fs::write(&empty, "").unwrap();
        let e = forward_signature(&empty).unwrap_err();
        assert!(
            e.message.contains("empty.pt: not a TorchScript archive"),
            "{e}"
        );

        let e = forward_signature(&dir.path().join("missing.pt")).unwrap_err();
        assert_eq!(e.kind, crate::core::error::ErrorKind::NotFound);
        assert!(e.message.contains("missing.pt: cannot open"), "{e}");

        let zip_at = |name: &str, entries: &[(&str, &[u8])]| {
            let path = dir.path().join(name);
            let mut w = zip::ZipWriter::new(std::fs::File::create(&path).unwrap());
            for (entry, bytes) in entries {
                w.start_file(*entry, zip::write::FileOptions::default())
                    .unwrap();
                std::io::Write::write_all(&mut w, bytes).unwrap();
            }
            w.finish().unwrap();
            path
        };
        let e = forward_signature(&zip_at("nopkl.pt", &[("m/version", b"3\n")])).unwrap_err();
        assert!(
            e.message
                .ends_with("nopkl.pt: not a TorchScript archive (no m/data.pkl)"),
            "{e}"
        );
        let e = forward_signature(&zip_at("nozip.pt", &[])).unwrap_err();
        assert!(e.message.contains("not a TorchScript archive"), "{e}");
        let e = forward_signature(&zip_at("flat.pt", &[("data.pkl", b"\x80\x02")])).unwrap_err();
        assert!(e.message.contains("is not in a folder"), "{e}");
        let e = forward_signature(&zip_at("pickle.pt", &[("m/data.pkl", b"\x80\x04\x95")]))
            .unwrap_err();
        assert!(e.message.contains("m/data.pkl does not start with"), "{e}");

        let pkl: &[u8] = b"\x80\x02c__torch__.a\nNet\nq\x00)\x81}.";
        let e = forward_signature(&zip_at("nocode.pt", &[("m/data.pkl", pkl)])).unwrap_err();
        assert!(
            e.message
                .contains("nocode.pt: unreadable code file: no m/code/__torch__/a.py"),
            "{e}"
        );
        let e = forward_signature(&zip_at(
            "binary.pt",
            &[("m/data.pkl", pkl), ("m/code/__torch__/a.py", b"\xff\xfe")],
        ))
        .unwrap_err();
        assert!(
            e.message.contains("m/code/__torch__/a.py is not UTF-8"),
            "{e}"
        );
        let code = b"class Net(Module):\n  def other(self: __torch__.a.Net) -> Tensor:\n";
        let e = forward_signature(&zip_at(
            "noforward.pt",
            &[("m/data.pkl", pkl), ("m/code/__torch__/a.py", code)],
        ))
        .unwrap_err();
        assert!(
            e.message
                .ends_with("__torch__.a.Net in m/code/__torch__/a.py: no forward method"),
            "{e}"
        );
    }

    #[test]
    fn never_panics_on_damaged_archives() {
        let good = std::fs::read(fixture("add_sub.pt")).unwrap();
        let check = |bytes: &[u8]| {
            let _ = read_signature(std::io::Cursor::new(bytes), Path::new("m.pt"));
        };
        for len in 0..good.len() {
            check(&good[..len]);
        }
        for at in 0..good.len() {
            for flip in [0x01u8, 0x80, 0xff] {
                let mut bad = good.clone();
                bad[at] ^= flip;
                check(&bad);
            }
        }
    }

    #[test]
    fn parses_python_printed_defs() {
        let text = "  def forward(self: __torch__.AddSub,\n    INPUT0: Tensor,\n    \
                    INPUT1: Tensor) -> Tuple[Tensor, Tensor]:\n    return (INPUT0, INPUT1)\n";
        assert_eq!(
            parse_def(text).unwrap(),
            sig(
                &[("INPUT0", "Tensor"), ("INPUT1", "Tensor")],
                "Tuple[Tensor, Tensor]"
            )
        );
        assert_eq!(
            parse_def("def forward(self: __torch__.X) -> Tensor:").unwrap(),
            sig(&[], "Tensor")
        );

        let edge = r#"  def forward(self: __torch__.pkg.mods.Edge,
    a: Tensor,
    b: Optional[Tensor]=None,
    n: int=3,
    s: str="x,y)",
    q: str='a\'],b',
    t: Tuple[int, float]=(1, 2.),
    d: Optional[Dict[str, List[Tensor]]]=None) -> Dict[str, Tensor]:
    return {"a": a}"#;
        let (args, returns) = parse_def(edge).unwrap();
        let with = |n: &str, t: &str, d: Option<&str>| Argument {
            default: d.map(str::to_string),
            ..arg(n, t)
        };
        assert_eq!(
            args,
            [
                with("a", "Tensor", None),
                with("b", "Optional[Tensor]", Some("None")),
                with("n", "int", Some("3")),
                with("s", "str", Some("\"x,y)\"")),
                with("q", "str", Some(r"'a\'],b'")),
                with("t", "Tuple[int, float]", Some("(1, 2.)")),
                with("d", "Optional[Dict[str, List[Tensor]]]", Some("None")),
            ]
        );
        assert_eq!(returns, "Dict[str, Tensor]");

        for broken in [
            "",
            "def forward(self: X",
            "def forward(self: X, a) -> Tensor:",
            "def forward(self: X) :",
            "def forward(self: X) -> Tensor",
            "def forward(self: X) -> :",
            "def other(self: X) -> Tensor:",
        ] {
            assert!(parse_def(broken).is_err(), "{broken:?}");
        }
    }

    #[test]
    fn finds_the_class_among_others() {
        let code = "class Sub(Module):\n  def forward(self: __torch__.m.Sub,\n    \
                    argument_1: Tensor) -> Tensor:\n    return argument_1\n\
                    class Top(Module):\n  sub : __torch__.m.Sub\n  \
                    def forward1(self: __torch__.m.Top) -> int:\n    return 1\n  \
                    def forward(self: __torch__.m.Top,\n    x: List[str]) -> List[str]:\n    \
                    return x\n";
        assert_eq!(
            class_forward(code, "Top").unwrap(),
            sig(&[("x", "List[str]")], "List[str]")
        );
        assert_eq!(
            class_forward(code, "Sub").unwrap(),
            sig(&[("argument_1", "Tensor")], "Tensor")
        );
        assert_eq!(class_forward(code, "Other").unwrap_err(), "no class Other");
        let no_forward = "class A(Module):\n  x : int\nclass B(Module):\n  \
                          def forward(self: B) -> Tensor:\n";
        assert_eq!(
            class_forward(no_forward, "A").unwrap_err(),
            "no forward method"
        );
    }

    #[test]
    fn reads_the_root_global() {
        assert_eq!(
            root_global(b"\x80\x02c__torch__.a.___torch_mangle_3\nInner\nq\x00"),
            Some(("__torch__.a.___torch_mangle_3".into(), "Inner".into()))
        );
        assert_eq!(
            root_global(b"\x80\x02c__torch__\nAddSub\n"),
            Some(("__torch__".into(), "AddSub".into()))
        );
        for bad in [
            &b""[..],
            b"\x80\x02c__torch__\nAddSub",
            b"\x80\x02cbuiltins\nset\n",
            b"\x80\x02c__torch__.a/../b\nX\n",
            b"\x80\x02c__torch__.\nX\n",
            b"\x80\x03c__torch__\nX\n",
        ] {
            assert_eq!(root_global(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn counts_returned_values() {
        let count = |returns: &str| {
            Signature {
                class: String::new(),
                args: Vec::new(),
                returns: returns.into(),
            }
            .return_count()
        };
        assert_eq!(count("Tuple[Tensor, Tensor, List[str]]"), Some(3));
        assert_eq!(count("Tuple[Tensor, Dict[str, Tensor]]"), Some(2));
        assert_eq!(count("Tensor"), Some(1));
        assert_eq!(count("List[str]"), Some(1));
        assert_eq!(count("Dict[str, Tensor]"), Some(1));
        assert_eq!(count("List[Tensor]"), None);
        assert_eq!(count("NoneType"), Some(0));
        assert_eq!(count("Tuple[()]"), Some(0));
    }
}
