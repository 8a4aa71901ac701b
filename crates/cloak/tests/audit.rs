//! `cloak audit` as a user runs it: the built binary, a small audit, its table and files.

use std::path::Path;
use std::process::Command;

const CLOAK: &str = env!("CARGO_BIN_EXE_cloak");

fn has_font() -> bool {
    std::env::var_os("CLOAK_FONT").is_some()
        || Path::new("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf").exists()
}

#[test]
fn audits_schemes_side_by_side_and_writes_reports() {
    let dir = tempfile::tempdir().unwrap();
    let html = dir.path().join("audit.html");
    let md = dir.path().join("audit.md");
    let png = dir.path().join("audit.png");
    let mut args: Vec<String> = [
        "audit",
        "--scheme",
        "cloak,encrypted,unsafe",
        "--workload",
        "one-key",
        "--versus",
        "uniform:writes=0.2",
        "--requests",
        "400",
        "--capacity",
        "100",
        "--batch-interval",
        "5ms",
        "--report",
    ]
    .map(String::from)
    .to_vec();
    args.push(html.display().to_string());
    if has_font() {
        args.extend(["--plot".into(), png.display().to_string()]);
    }
    let out = Command::new(CLOAK).args(&args).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&str> = stdout.lines().collect();
    assert!(
        rows.iter()
            .any(|l| l.starts_with("scheme") && l.contains("told apart"))
    );
    let row = |scheme: &str| {
        rows.iter()
            .find(|l| l.starts_with(&format!("{scheme} ")))
            .unwrap()
            .to_string()
    };
    assert!(row("cloak").contains("no ("), "{stdout}");
    assert!(row("cloak").contains("fixed"), "{stdout}");
    assert!(row("unsafe").contains("yes ("), "{stdout}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.starts_with("<!DOCTYPE html>") && page.contains("<h2><code>encrypted</code></h2>")
    );
    if has_font() {
        assert!(std::fs::metadata(&png).unwrap().len() > 1000);
        assert!(page.contains("<img src=\"audit.png\""));
    }

    // Markdown, one scheme.
    let out = Command::new(CLOAK)
        .args([
            "audit",
            "--scheme",
            "encrypted",
            "-a",
            "markov",
            "-b",
            "uniform",
            "-n",
            "300",
        ])
        .args(["--capacity", "50", "--report"])
        .arg(&md)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&md).unwrap();
    assert!(text.contains("## `encrypted`") && text.contains("| correlated queries (IHOP) |"));
}

#[test]
fn refuses_what_it_cannot_audit() {
    let run = |args: &[&str]| {
        let out = Command::new(CLOAK)
            .arg("audit")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).to_string()
    };
    assert!(run(&["--workload", "zipf", "--versus", "uniform"]).contains("unknown workload"));
    assert!(
        run(&["--scheme", "nope", "-a", "uniform", "-b", "uniform"]).contains("unknown scheme")
    );
    assert!(
        run(&[
            "-a",
            "one-key:key=5000",
            "-b",
            "uniform",
            "--capacity",
            "10",
            "--scheme",
            "unsafe"
        ])
        .contains("beyond the store's 10 keys")
    );
    assert!(
        run(&[
            "-a", "uniform", "-b", "uniform", "-n", "10", "--report", "x.pdf", "--scheme", "unsafe"
        ])
        .contains(".md")
    );
}
