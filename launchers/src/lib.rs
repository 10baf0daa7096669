//! How daisy starts and cancels workers: the `Launcher` trait and its
//! backends (local processes, sbatch, bsub, slurmrestd). Launchers never
//! decide how many workers a task gets; the driver does. Nothing lives
//! here yet; the crate exists so the workspace has the shape the design
//! fixes.
