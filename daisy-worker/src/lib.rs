//! The daisy worker: it will read `DAISY_CONTEXT`, connect back to the
//! driver, run the user's command per block and watch over it (see
//! `DESIGN.md`, "Workers and user code"). Nothing lives here yet; the
//! crate exists so the workspace has the shape the design fixes.
