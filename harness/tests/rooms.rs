//! The library's rooms make no circle and stand at most ten floors high (`ci/rooms.py`, issue
//! #29): a change that makes one room reach back into a room that reaches it fails here.

use std::path::Path;
use std::process::{Command, Output};

fn rooms(args: &[&str]) -> Output {
    Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../ci/rooms.py"))
        .args(args)
        .output()
        .expect("python3 runs")
}

#[test]
fn the_library_has_no_circle_and_at_most_ten_floors() {
    let out = rooms(&["--check"]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("floors: "),
        "{out:?}"
    );
}

#[test]
fn a_circle_between_two_rooms_fails_the_check() {
    let dir = std::env::temp_dir().join(format!("kpct-rooms-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("c")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(dir.join("a.rs"), "use crate::b::B;\npub struct A;\n").unwrap();
    std::fs::write(dir.join("b.rs"), "use crate::a::A;\npub struct B;\n").unwrap();
    // A comment naming a room is no line to it.
    std::fs::write(dir.join("c/mod.rs"), "// crate::a\nmod d;\n").unwrap();
    std::fs::write(dir.join("c/d.rs"), "use super::super::a::A;\n").unwrap();
    let out = rooms(&["--check", "--root", dir.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text.contains("circle of modules: a ↔ b"), "{text}");
    assert!(text.contains("circle of files: a ↔ b"), "{text}");
    assert!(!text.contains("c ↔"), "{text}");
}

/// A circle between two files of one room fails too, in `scenario/` as anywhere (it was once
/// exempt there).
#[test]
fn a_circle_between_two_files_of_one_room_fails_the_check() {
    let dir = std::env::temp_dir().join(format!("kpct-rooms-files-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("scenario")).unwrap();
    std::fs::write(dir.join("lib.rs"), "mod scenario;\n").unwrap();
    std::fs::write(dir.join("scenario/mod.rs"), "mod x;\nmod y;\n").unwrap();
    std::fs::write(
        dir.join("scenario/x.rs"),
        "use super::y::Y;\npub struct X;\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("scenario/y.rs"),
        "use super::x::X;\npub struct Y;\n",
    )
    .unwrap();
    let out = rooms(&["--check", "--root", dir.to_str().unwrap()]);
    std::fs::remove_dir_all(&dir).unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text.contains("circle of files: scenario/x ↔ scenario/y"),
        "{text}"
    );
}
