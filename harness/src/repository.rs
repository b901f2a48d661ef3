//! Where the repository kpct belongs to lies: its scenario library, `known-differences.yaml` and
//! the real proxiers `ci/real-proxiers.sh` built (`target/real-proxiers`).
//!
//! Where kpct was built, if that directory is still there; otherwise the repository that holds
//! the running binary (`<repository>/target/<profile>/kpct`), so a kpct carried elsewhere with
//! its repository (the Vagrant lab's synced folder, a CI artifact unpacked at another path)
//! finds its files.

use std::path::{Path, PathBuf};

/// The repository root: see the module's documentation. `None` when neither is there.
pub fn root() -> Option<PathBuf> {
    // The harness crate is one level below the repository root.
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?;
    if is_repository(built) {
        return Some(built.to_path_buf());
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .find(|dir| is_repository(dir))
        .map(Path::to_path_buf)
}

/// The repository root, or where kpct was built when neither exists (for an error that names
/// the path looked at).
pub fn root_or_built() -> PathBuf {
    root().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    })
}

/// kpct's repository: the workspace manifest beside the harness crate.
fn is_repository(dir: &Path) -> bool {
    dir.join("Cargo.toml").is_file() && dir.join("harness/Cargo.toml").is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_kpct_is_built_in_is_found() {
        let root = root().expect("the repository");
        assert!(root.join("scenarios").is_dir(), "{}", root.display());
        assert!(
            root.join("known-differences.yaml").is_file(),
            "{}",
            root.display()
        );
    }

    #[test]
    fn a_directory_without_the_workspace_is_not_a_repository() {
        let dir = std::env::temp_dir();
        assert!(!is_repository(&dir));
        assert!(is_repository(&root_or_built()));
    }
}
