//! The account's API quota as this instance may use it: the refill rates AWS publishes, the
//! most of them this instance may take, and one pacer per quota.
//!
//! Step Functions throttles each API action per account and region with a token bucket of
//! its own (the "API action throttling" quotas of the Step Functions developer guide,
//! standard workflows). A poll costs one GetExecutionHistory call (20 calls/s everywhere), or
//! one DescribeExecution call for tools with `history: false` (15/s in us-east-1, us-west-2
//! and eu-west-1, 10/s elsewhere); learning which executions ended costs ListExecutions calls
//! (5/s in those three regions, 2/s elsewhere).
//!
//! Nothing tells one flowgate instance what another spends, nor how many there are (the
//! platform decides: Lambda runs one per concurrent request). Each pacer finds this instance's
//! share from throttling (see [`flowgate_core::pacing`]): instances that poll one account
//! converge on its refill rate between them, and a lone one gets all of it. [`SHARE_ENV`] is
//! a ceiling, for an account shared with other software: this instance never plans for more
//! than that share of the account (1 by default).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use flowgate_core::pacing::Pacer;

use crate::SfnTarget;
use crate::ends::Ends;

/// The environment variable holding the most of the account's quota this instance may take.
pub const SHARE_ENV: &str = "FLOWGATE_STEPFUNCTIONS_QUOTA_SHARE";

const GET_EXECUTION_HISTORY_REFILL: f64 = 20.0;
const DESCRIBE_EXECUTION_REFILL_LARGE: f64 = 15.0;
const DESCRIBE_EXECUTION_REFILL: f64 = 10.0;
const LIST_EXECUTIONS_REFILL_LARGE: f64 = 5.0;
const LIST_EXECUTIONS_REFILL: f64 = 2.0;
/// The regions with the larger buckets.
const LARGE_REGIONS: [&str; 3] = ["us-east-1", "us-west-2", "eu-west-1"];

/// The most of the account's quota this instance may take, from [`SHARE_ENV`].
///
/// # Errors
/// A message naming the variable when it is set to anything but a number in (0, 1].
pub(crate) fn share() -> Result<f64, String> {
    parse_share(std::env::var(SHARE_ENV).ok().as_deref())
}

fn parse_share(value: Option<&str>) -> Result<f64, String> {
    let Some(value) = value.map(str::trim).filter(|v| !v.is_empty()) else {
        return Ok(1.0);
    };
    match value.parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        _ => Err(format!(
            "{SHARE_ENV} must be a number above 0 and at most 1 (this instance's share of the \
             account's Step Functions API quota flowgate may use when other software shares the \
             account, such as 0.5 for half of it), not \
             {value:?}"
        )),
    }
}

/// What one tool's engine spends its quota through.
#[derive(Debug, Clone)]
pub(crate) struct Quota {
    /// The calls a poll costs (GetExecutionHistory, or DescribeExecution without history).
    pub(crate) reads: Arc<Pacer>,
    /// ListExecutions, shared by every state machine of the account.
    pub(crate) lists: Arc<Pacer>,
    /// Which executions of this tool's state machine ended.
    pub(crate) ends: Arc<Ends>,
}

impl Quota {
    /// The quota `target` spends, at most `share` of the account's refill rates. Tools on one
    /// account (and region, endpoint and role) share its pacers, as they share its buckets;
    /// tools on one state machine share what is known of its ends.
    pub(crate) fn of(target: &SfnTarget, share: f64) -> Quota {
        static PACERS: OnceLock<Mutex<HashMap<String, Arc<Pacer>>>> = OnceLock::new();
        static ENDS: OnceLock<Mutex<HashMap<String, Arc<Ends>>>> = OnceLock::new();
        let region = target.region();
        let large = LARGE_REGIONS.contains(&region.as_str());
        let account = target.state_machine_arn.split(':').nth(4).unwrap_or("");
        let key = format!(
            "{region}|{account}|{}|{}|{share}",
            target.endpoint_url.as_deref().unwrap_or(""),
            target.role_arn.as_deref().unwrap_or(""),
        );
        let (read_call, read_refill) = match (target.history, large) {
            (true, _) => ("GetExecutionHistory", GET_EXECUTION_HISTORY_REFILL),
            (false, true) => ("DescribeExecution", DESCRIBE_EXECUTION_REFILL_LARGE),
            (false, false) => ("DescribeExecution", DESCRIBE_EXECUTION_REFILL),
        };
        let list_refill = if large {
            LIST_EXECUTIONS_REFILL_LARGE
        } else {
            LIST_EXECUTIONS_REFILL
        };
        let pacer = |call: &str, refill: f64| {
            let mut pacers = PACERS
                .get_or_init(Default::default)
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            pacers
                .entry(format!("{key}|{call}"))
                .or_insert_with(|| Arc::new(Pacer::new(refill * share)))
                .clone()
        };
        let reads = pacer(read_call, read_refill);
        let lists = pacer("ListExecutions", list_refill);
        let ends = ENDS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(format!("{key}|{}", target.unqualified_arn()))
            .or_insert_with(|| Arc::new(Ends::new(target.unqualified_arn())))
            .clone();
        Quota { reads, lists, ends }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_is_a_fraction_and_a_bad_one_names_the_variable() {
        assert_eq!(parse_share(None), Ok(1.0));
        assert_eq!(parse_share(Some("")), Ok(1.0));
        assert_eq!(parse_share(Some("0.25")), Ok(0.25));
        assert_eq!(parse_share(Some(" 1 ")), Ok(1.0));
        for bad in ["0", "-0.5", "1.5", "quarter", "NaN"] {
            let e = parse_share(Some(bad)).expect_err(bad);
            assert!(e.contains(SHARE_ENV) && e.contains(bad), "{e}");
        }
    }

    fn target(arn: &str, history: bool) -> SfnTarget {
        SfnTarget::from_config(
            serde_json::json!({"state_machine_arn": arn, "history": history, "endpoint_url": "http://quota-test"})
                .as_object()
                .expect("object"),
            &serde_json::Map::new(),
        )
        .expect("target")
    }

    #[test]
    fn tools_share_the_account_s_pacers_and_a_state_machine_s_ends() {
        let a = Quota::of(
            &target("arn:aws:states:us-east-1:111111111111:stateMachine:a", true),
            1.0,
        );
        let a2 = Quota::of(
            &target(
                "arn:aws:states:us-east-1:111111111111:stateMachine:a:prod",
                true,
            ),
            1.0,
        );
        let b = Quota::of(
            &target("arn:aws:states:us-east-1:111111111111:stateMachine:b", true),
            1.0,
        );
        let other_region = Quota::of(
            &target(
                "arn:aws:states:ap-south-1:111111111111:stateMachine:a",
                true,
            ),
            1.0,
        );
        assert!(Arc::ptr_eq(&a.reads, &b.reads));
        assert!(Arc::ptr_eq(&a.lists, &b.lists));
        assert!(
            Arc::ptr_eq(&a.ends, &a2.ends),
            "an alias is the same machine"
        );
        assert!(!Arc::ptr_eq(&a.ends, &b.ends));
        assert!(!Arc::ptr_eq(&a.reads, &other_region.reads));
        // The refill rates: at most 80% of them.
        assert_eq!(a.lists.ceiling(), 4.0, "5/s in us-east-1");
        assert_eq!(other_region.lists.ceiling(), 1.6, "2/s elsewhere");
        let quarter = Quota::of(
            &target("arn:aws:states:us-east-1:111111111111:stateMachine:a", true),
            0.25,
        );
        assert!(!Arc::ptr_eq(&a.reads, &quarter.reads));
        assert_eq!(quarter.reads.ceiling(), 4.0, "a quarter of 20/s");
        let describe = Quota::of(
            &target(
                "arn:aws:states:ap-south-1:111111111111:stateMachine:a",
                false,
            ),
            1.0,
        );
        assert_eq!(
            describe.reads.ceiling(),
            8.0,
            "10/s outside the large regions"
        );
    }
}
