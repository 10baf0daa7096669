//! Samples in the formats of LSF's documentation: bjobs -o (IBM Spectrum
//! LSF 10.1 "bjobs -o": fields in the order given, unlimited width when
//! none is given), -noheader, "Job <123> is not found" (lsf.conf
//! LSB_BJOBS_CONSISTENT_EXIT_CODE examples), array elements sharing
//! their array's JOBID (lsf.conf LSB_BJOBS_DISPLAY_ENH).

use super::*;

fn element(job: u64, index: u32) -> Element {
    Element { job, index }
}

fn exited(code: i32) -> ElementState {
    ElementState::Ended(JobEnd::Exited { code })
}

#[test]
fn rows_of_an_array_in_every_state_are_read() {
    let stdout = "\
12345 1 DONE -
12345 2 EXIT 3
12345 3 RUN -
12345 4 PEND -
12345 5 PSUSP -
12345 6 USUSP -
";
    let report = parse_states(stdout, "");
    let expected = vec![
        (element(12345, 1), exited(0)),
        (element(12345, 2), exited(3)),
        (element(12345, 3), ElementState::Running),
        (element(12345, 4), ElementState::Queued),
        (element(12345, 5), ElementState::Queued),
        (element(12345, 6), ElementState::Running),
    ];
    assert_eq!(report.elements, expected);
    assert!(report.not_found.is_empty() && report.unreadable.is_empty());
}

#[test]
fn a_job_outside_arrays_has_index_zero() {
    let report = parse_states("4711 0 RUN -\n", "");
    assert_eq!(
        report.elements,
        vec![(element(4711, 0), ElementState::Running)]
    );
}

#[test]
fn padded_columns_and_a_done_job_showing_zero_are_read() {
    let stdout = "12345   2        DONE  0\n12345   3        EXIT  130   \n";
    let report = parse_states(stdout, "");
    let expected = vec![
        (element(12345, 2), exited(0)),
        (element(12345, 3), exited(130)),
    ];
    assert_eq!(report.elements, expected);
}

#[test]
fn enhanced_job_ids_with_the_index_are_read() {
    let report = parse_states("12345[7] 7 DONE -\n", "");
    assert_eq!(report.elements, vec![(element(12345, 7), exited(0))]);
}

#[test]
fn not_found_lines_on_stderr_name_forgotten_jobs() {
    let stderr = "Job <123> is not found\nJob <12345[3]> is not found\nNo unfinished job found\n";
    let report = parse_states("", stderr);
    let expected = BTreeSet::from([element(123, 0), element(12345, 3)]);
    assert_eq!(report.not_found, expected);
    assert!(report.elements.is_empty());
}

#[test]
fn zombi_and_unkwn_end_as_failures_and_exit_without_code_too() {
    for (stat, code) in [("ZOMBI", "-"), ("UNKWN", "-"), ("EXIT", "-")] {
        let state = element_state(stat, code);
        assert!(
            matches!(state, ElementState::Ended(JobEnd::Failed { .. })),
            "{stat}: {state:?}"
        );
    }
}

#[test]
fn unknown_states_never_end_a_job() {
    assert_eq!(element_state("POST_DONE", "-"), ElementState::Running);
    assert_eq!(element_state("SSUSP", "-"), ElementState::Running);
    assert_eq!(element_state("WAIT", "-"), ElementState::Queued);
}

#[test]
fn headers_and_garbage_are_kept_as_unreadable() {
    let stdout = "JOBID JOBINDEX STAT EXIT_CODE\n12345 1 RUN -\nLSF is down.\n";
    let report = parse_states(stdout, "");
    assert_eq!(
        report.elements,
        vec![(element(12345, 1), ElementState::Running)]
    );
    assert_eq!(report.unreadable.len(), 2, "{:?}", report.unreadable);
}

#[test]
fn elements_print_as_lsf_names_them() {
    assert_eq!(element(12345, 3).to_string(), "12345[3]");
    assert_eq!(element(12345, 0).to_string(), "12345");
    assert_eq!(Element::parse("12345[3]"), Some(element(12345, 3)));
    assert_eq!(Element::parse("12345"), Some(element(12345, 0)));
    assert_eq!(Element::parse("12345[x]"), None);
    assert_eq!(Element::parse("abc"), None);
}

#[test]
fn job_arguments_compress_indices_into_lsf_index_lists() {
    let elements = BTreeSet::from([
        element(12345, 1),
        element(12345, 2),
        element(12345, 3),
        element(12345, 7),
        element(12346, 4),
        element(4711, 0),
    ]);
    let arguments = job_arguments(&elements);
    assert_eq!(arguments, vec!["4711", "12345[1-3,7]", "12346[4]"]);
}
