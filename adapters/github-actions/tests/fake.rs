//! The GitHub Actions engine against the REST fake whose runs really run with act
//! (tests/fakes/github): the shared engine conformance suite, then what only this engine
//! promises, one module per concern.

#[path = "fake/support.rs"]
mod support;

#[path = "fake/app.rs"]
mod app;
#[path = "fake/cancel.rs"]
mod cancel;
#[path = "fake/conformance.rs"]
mod conformance;
#[path = "fake/faults.rs"]
mod faults;
#[path = "fake/paging.rs"]
mod paging;
#[path = "fake/reviews.rs"]
mod reviews;
#[path = "fake/runs.rs"]
mod runs;
#[path = "fake/setup_errors.rs"]
mod setup_errors;
#[path = "fake/starts.rs"]
mod starts;
