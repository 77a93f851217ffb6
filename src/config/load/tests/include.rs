//! h2o's `!file` and `!env` tags: included files and environment values, with errors at the
//! included file's lines.

use super::*;
use std::fs;

/// Writes `files` (name, text) into a fresh directory; the first is the configuration.
fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        let text = text.replace("$DIR", &dir.path().display().to_string());
        fs::write(dir.path().join(name), text).unwrap();
    }
    let main = dir.path().join(files[0].0);
    (dir, main)
}

#[test]
fn a_file_tag_includes_a_path_mapping_and_a_merged_one() {
    let (_dir, main) = tree(&[
        (
            "h2o.conf",
            "\
listen: 8080
hosts:
  default:
    paths:
      /: !file $DIR/root.conf
      /merged:
        <<: !file headers.conf
        file.dir: /srv
",
        ),
        (
            "root.conf",
            "header.add: \"foo: FOO\"\nfile.dir: /var/www\n",
        ),
        (
            "headers.conf",
            "<<: !file more.conf\nheader.append: \"bar: BAR\"\n",
        ),
        ("more.conf", "header.add: \"foo: FOO\"\n"),
    ]);
    let c = match load_file(&main) {
        Ok(c) => c,
        Err(e) => panic!("{e:?}"),
    };
    let root = path(&c, 0, "/");
    assert_eq!(file(root).dir, PathBuf::from("/var/www"));
    assert_eq!(headers(root), vec![(HeaderOp::Add, "foo", "FOO")]);
    assert_eq!(
        headers(path(&c, 0, "/merged")),
        vec![
            (HeaderOp::Add, "foo", "FOO"),
            (HeaderOp::Append, "bar", "BAR")
        ]
    );
}

#[test]
fn an_error_in_an_included_file_names_that_file_and_line() {
    let (dir, main) = tree(&[
        (
            "h2o.conf",
            "listen: 8080\nhosts:\n  default:\n    paths:\n      /: !file root.conf\n",
        ),
        ("root.conf", "file.dir: /srv\nfile.etag: perhaps\n"),
    ]);
    let e: Vec<String> = match load_file(&main) {
        Ok(_) => panic!("expected errors"),
        Err(e) => e.iter().map(|e| e.to_string()).collect(),
    };
    let included = dir.path().join("root.conf");
    assert_eq!(
        e,
        vec![format!(
            "{}:2: file.etag expects ON or OFF, got \"perhaps\"",
            included.display()
        )]
    );
}

#[test]
fn a_missing_or_looping_include_is_an_error_at_the_tag() {
    let (dir, main) = tree(&[
        (
            "h2o.conf",
            "listen: 8080\nhosts:\n  default:\n    paths:\n      /: !file nowhere.conf\n",
        ),
        ("loop.conf", "!file loop.conf\n"),
    ]);
    let e = load_file(&main).err().unwrap_or_default();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(e[0].at.line, 5);
    assert!(
        e[0].message.starts_with("!file nowhere.conf: cannot read "),
        "{e:?}"
    );

    fs::write(
        &main,
        "listen: 8080\nhosts:\n  default:\n    paths:\n      /: !file loop.conf\n",
    )
    .unwrap();
    let e = load_file(&main).err().unwrap_or_default();
    assert_eq!(e.len(), 1, "{e:?}");
    assert_eq!(
        *e[0].at.file,
        *dir.path().join("loop.conf").display().to_string()
    );
    assert!(e[0].message.contains("more than 8 deep"), "{e:?}");
}

#[test]
fn an_env_tag_is_the_variable_as_a_scalar() {
    // Names no other test uses.
    std::env::set_var("SPATE_TEST_INCLUDE_HEADER", "hello: world");
    std::env::set_var("SPATE_TEST_INCLUDE_PORT", "8081");
    let c = ok("\
listen:
  port: !env SPATE_TEST_INCLUDE_PORT
hosts:
  default:
    paths:
      /:
        header.add: !env SPATE_TEST_INCLUDE_HEADER
        file.dir: /srv
");
    assert_eq!(c.listeners[0].addr.port(), 8081);
    assert_eq!(
        headers(path(&c, 0, "/")),
        vec![(HeaderOp::Add, "hello", "world")]
    );
    // Unset: empty, as h2o, which the directive then refuses.
    let e = errors("listen:\n  port: !env SPATE_TEST_INCLUDE_UNSET\nhosts: {}\n");
    assert!(e[0].starts_with("t.yaml:2: "), "{e:?}");
}
