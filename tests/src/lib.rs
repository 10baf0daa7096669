//! Support code for the end-to-end tests lives in `e2e/`.
