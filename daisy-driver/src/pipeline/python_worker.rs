//! The Python worker, `PYTHON -m daisy_rs.worker`: what a function task's
//! workers run unless the task names its own `worker_program`. Named here
//! once, because resolution writes it as that default, the fork server
//! recognises it, and a driver embedded in Python starts it as its worker.
//!
//! Which interpreter is the caller's to say (a value, not a global), so
//! one pipeline file resolves the same wherever it is read: the driver
//! passes its own interpreter when it runs in one, else [`PYTHON_ON_PATH`].

/// The module a Python interpreter runs as a worker.
pub const MODULE: &str = "daisy_rs.worker";

/// The interpreter of a driver that runs in none: `python3` from PATH.
pub const PYTHON_ON_PATH: &str = "python3";

/// What follows the interpreter: `-m daisy_rs.worker`.
pub fn args() -> Vec<String> {
    vec!["-m".to_string(), MODULE.to_string()]
}

/// `PYTHON -m daisy_rs.worker`, as a program and its arguments.
pub fn command(python: &str) -> Vec<String> {
    std::iter::once(python.to_string()).chain(args()).collect()
}

/// Whether `argv` is `PYTHON -m daisy_rs.worker`; its `PYTHON` if so.
pub fn python_of(argv: &[String]) -> Option<&str> {
    match argv {
        [python, flag, module] if flag == "-m" && module == MODULE => Some(python),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_worker_command_is_recognised_and_nothing_else() {
        let command = command("/venv/bin/python");
        assert_eq!(command, ["/venv/bin/python", "-m", "daisy_rs.worker"]);
        assert_eq!(python_of(&command), Some("/venv/bin/python"));
        let other = ["python3", "-m", "my.worker"].map(String::from);
        assert_eq!(python_of(&other), None);
    }
}
