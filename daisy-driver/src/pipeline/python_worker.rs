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

/// `PYTHON -m daisy_rs.worker`, as a program and its arguments.
pub fn command(python: &str) -> Vec<String> {
    vec![python.to_string(), "-m".to_string(), MODULE.to_string()]
}

/// Whether `argv` is `PYTHON -m daisy_rs.worker`; its `PYTHON` if so.
pub fn python_of(argv: &[String]) -> Option<&str> {
    match argv {
        [python, flag, module] if flag == "-m" && module == MODULE => Some(python),
        _ => None,
    }
}
