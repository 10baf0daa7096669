//! Whether a command's program can start at all, checked before any block
//! runs: a typo such as `pyhton3` or `./segg.sh` would otherwise fail
//! every try of every block, each time with the same message.
//!
//! The lookup is exec's: a name without a slash is searched on `PATH`; a
//! path with one is taken relative to the directory the command will run
//! in, and must be an executable file.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Why a command's program cannot start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProgramError {
    #[error("program {program:?} is not found on PATH")]
    NotOnPath { program: String },
    #[error("program {program:?} does not exist (looked for {})", path.display())]
    Missing { program: String, path: PathBuf },
    #[error("program {program:?} is not an executable file ({})", path.display())]
    NotExecutable { program: String, path: PathBuf },
}

/// Checks that `program` resolves as exec would resolve it for a command
/// running in `dir` with the user's `env` on top of this process's
/// environment (so `env` may set its own `PATH`).
pub fn check_program(
    program: &str,
    dir: &Path,
    env: &BTreeMap<String, String>,
) -> Result<(), ProgramError> {
    if !program.contains('/') {
        let path_var = env
            .get("PATH")
            .map(OsString::from)
            .or_else(|| std::env::var_os("PATH"));
        return match which::which_in(program, path_var, dir) {
            Ok(_) => Ok(()),
            Err(_) => Err(ProgramError::NotOnPath {
                program: program.to_string(),
            }),
        };
    }
    let path: PathBuf = dir.join(program).components().collect();
    let metadata = std::fs::metadata(&path).map_err(|_| ProgramError::Missing {
        program: program.to_string(),
        path: path.clone(),
    })?;
    if metadata.is_file() && metadata.permissions().mode() & 0o111 != 0 {
        return Ok(());
    }
    Err(ProgramError::NotExecutable {
        program: program.to_string(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn executable(path: &Path, mode: u32) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn names_are_looked_up_on_path_and_paths_in_the_command_dir() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        fs::create_dir(&bin).unwrap();
        executable(&bin.join("seg"), 0o755);
        executable(&dir.path().join("seg.sh"), 0o755);
        executable(&dir.path().join("notes.sh"), 0o644);
        let env = BTreeMap::from([("PATH".to_string(), bin.display().to_string())]);
        let check = |program: &str| check_program(program, dir.path(), &env);
        assert_eq!(check("seg"), Ok(()));
        assert_eq!(check("./seg.sh"), Ok(()));
        let absolute = bin.join("seg");
        assert_eq!(check(absolute.to_str().unwrap()), Ok(()));
        assert_eq!(
            check("pyhton3"),
            Err(ProgramError::NotOnPath {
                program: "pyhton3".into()
            })
        );
        let missing = check("./segg.sh").unwrap_err();
        assert_eq!(
            missing.to_string(),
            format!(
                "program \"./segg.sh\" does not exist (looked for {}/segg.sh)",
                dir.path().display()
            )
        );
        assert!(matches!(
            check("./notes.sh"),
            Err(ProgramError::NotExecutable { .. })
        ));
        assert!(matches!(
            check("./bin"),
            Err(ProgramError::NotExecutable { .. })
        ));
        assert!(matches!(
            check("seg.sh"),
            Err(ProgramError::NotOnPath { .. })
        ));
    }
}
