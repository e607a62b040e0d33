//! Environments holding a run: which of them wait for a decision (questions), which only for
//! a wait timer, and who can decide.
//!
//! GitHub has two kinds of deciders. Required reviewers are users and teams: a token of one of
//! them approves through `POST .../pending_deployments`; GitHub takes no App as a reviewer (the
//! endpoint refuses installation tokens). A custom deployment protection rule is a GitHub App:
//! it approves or rejects through `POST .../deployment_protection_rule`, for its own rule only.
//! So with a token flowgate answers where its user is a reviewer, and with App credentials
//! where the environment has the App's rule; every other question says who must answer it.

use chrono::{DateTime, Utc};
use flowgate_core::{EngineError, InputRequest};
use serde_json::json;

use crate::KIND;
use crate::api::{Api, Approval, PendingDeployment, Run};

/// Who can decide a held environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Decider {
    /// flowgate's token belongs to one of the required reviewers.
    Reviewer,
    /// flowgate is the GitHub App whose custom protection rule the environment has.
    App,
    /// Only others can: who, said to the caller.
    Others(String),
}

/// One environment holding the run.
#[derive(Debug, Clone)]
pub(crate) struct Gate {
    pub environment_id: u64,
    pub environment: String,
    pub decider: Decider,
    /// Whether someone must decide (reviewers or custom rules); else only a wait timer holds it.
    pub needs_decision: bool,
    pub wait_timer_minutes: u64,
    pub waiting_since: Option<DateTime<Utc>>,
    /// The login of the user who started the run when that user is also a required reviewer
    /// named here: with the environment's "Prevent self-review" on, GitHub refuses that user's
    /// approval, which is what flowgate's token meets when it dispatches and approves.
    pub started_by_reviewer: Option<String>,
}

/// A question's key: the environment and how many reviews it had before (unique for the
/// run's life: a second wait on the same environment gets the next number).
pub(crate) fn question_key(environment: u64, earlier_reviews: usize) -> String {
    format!("env-{environment}-{}", earlier_reviews + 1)
}

pub(crate) fn parse_question_key(key: &str) -> Option<(u64, usize)> {
    let rest = key.strip_prefix("env-")?;
    let (env, n) = rest.split_once('-')?;
    let n: usize = n.parse().ok()?;
    Some((env.parse().ok()?, n.checked_sub(1)?))
}

pub(crate) fn reviews_of(approvals: &[Approval], environment: u64) -> usize {
    approvals
        .iter()
        .filter(|a| a.environments.iter().any(|e| e.id == environment))
        .count()
}

/// The environments holding `run`, each with who can decide it.
pub(crate) async fn gates(api: &Api, run: &Run) -> Result<Vec<Gate>, EngineError> {
    let pending = api.pending_deployments(run.id).await?;
    let started_by = run.triggering_actor.as_ref().map(|u| u.login.as_str());
    let mut out = Vec::with_capacity(pending.len());
    let app_id = if pending.is_empty() {
        None
    } else {
        api.app_id().await?
    };
    for p in &pending {
        out.push(gate(api, p, app_id, started_by).await?);
    }
    Ok(out)
}

async fn gate(
    api: &Api,
    p: &PendingDeployment,
    app_id: Option<u64>,
    started_by: Option<&str>,
) -> Result<Gate, EngineError> {
    let name = p
        .environment
        .name
        .clone()
        .unwrap_or_else(|| p.environment.id.to_string());
    // Custom rules matter to an App (its own may be among them), and say who decides an
    // environment that has no reviewers.
    let rules = if app_id.is_some() || p.reviewers.is_empty() {
        api.protection_rules(&name).await?
    } else {
        Vec::new()
    };
    let reviewers: Vec<String> = p.reviewers.iter().map(|r| r.display()).collect();
    let apps: Vec<String> = rules
        .iter()
        .map(|r| match &r.app.slug {
            Some(slug) => format!("the GitHub App {slug}"),
            None => format!("the GitHub App {}", r.app.id),
        })
        .collect();
    let ours = app_id.is_some_and(|id| rules.iter().any(|r| r.app.id == id));
    let started_by_reviewer = started_by
        .filter(|who| {
            app_id.is_none()
                && p.reviewers
                    .iter()
                    .any(|r| r.reviewer.login.as_deref() == Some(*who))
        })
        .map(str::to_owned);
    let decider = if ours {
        Decider::App
    } else if app_id.is_none() && p.current_user_can_approve {
        Decider::Reviewer
    } else {
        let mut who = Vec::new();
        if let Some(me) = &started_by_reviewer {
            // flowgate's token user is a reviewer, yet GitHub says it cannot approve: only
            // "Prevent self-review" explains that, since that user started the run.
            let others: Vec<&String> = reviewers
                .iter()
                .filter(|r| **r != format!("@{me}"))
                .collect();
            let others = if others.is_empty() {
                "another required reviewer".to_owned()
            } else {
                format!(
                    "a required reviewer other than @{me}, {}",
                    others
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(" or ")
                )
            };
            who.push(format!(
                "{others} (the environment has \"Prevent self-review\" on, and @{me}, \
                 flowgate's token, started the run: GitHub lets nobody approve a run they \
                 started; turn the setting off, or give the environment a custom deployment \
                 protection rule of a GitHub App flowgate runs as)"
            ));
        } else if !reviewers.is_empty() {
            let because = if app_id.is_some() {
                " (GitHub takes no App as a required reviewer)"
            } else {
                " (flowgate's token is not one of them)"
            };
            who.push(format!(
                "a required reviewer, {}{because}",
                reviewers.join(" or ")
            ));
        }
        if !apps.is_empty() {
            who.push(apps.join(" or "));
        }
        Decider::Others(who.join("; or "))
    };
    Ok(Gate {
        environment_id: p.environment.id,
        environment: name,
        decider,
        needs_decision: !reviewers.is_empty() || !rules.is_empty(),
        wait_timer_minutes: p.wait_timer,
        waiting_since: p.wait_timer_started_at,
        started_by_reviewer,
    })
}

/// The questions of the gates that wait for a decision.
pub(crate) fn questions(run: &Run, gates: &[Gate], approvals: &[Approval]) -> Vec<InputRequest> {
    gates
        .iter()
        .filter(|g| g.needs_decision)
        .map(|g| {
            let mut message = format!(
                "Workflow run {} waits for a review to deploy to {}. Approve or reject?",
                run.id, g.environment
            );
            if g.wait_timer_minutes > 0 {
                message.push_str(&format!(
                    " (Its wait timer of {} min also has to run out.)",
                    g.wait_timer_minutes
                ));
            }
            if let Decider::Others(who) = &g.decider {
                message.push_str(&format!(
                    " flowgate cannot answer this one: {who} must review it in GitHub{}.",
                    run.html_url
                        .as_deref()
                        .map(|u| format!(" ({u})"))
                        .unwrap_or_default()
                ));
            }
            InputRequest {
                key: question_key(g.environment_id, reviews_of(approvals, g.environment_id)),
                message,
                requested_schema: json!({
                    "type": "object",
                    "properties": {
                        "decision": {"type": "string", "enum": ["approve", "reject"], "default": "approve",
                                     "description": "approve lets the deployment go on; reject ends it"},
                        "comment": {"type": "string", "description": "The review comment GitHub records"}
                    },
                    "required": ["decision"]
                }),
            }
        })
        .collect()
}

/// What the gates that hold the run only by a wait timer say meanwhile.
pub(crate) fn timers(gates: &[Gate]) -> Option<String> {
    let parts: Vec<String> = gates
        .iter()
        .filter(|g| !g.needs_decision && g.wait_timer_minutes > 0)
        .map(|g| match g.waiting_since {
            Some(since) => format!(
                "{}: wait timer of {} min, until {}",
                g.environment,
                g.wait_timer_minutes,
                (since + chrono::Duration::minutes(g.wait_timer_minutes as i64))
                    .format("%H:%M:%S UTC")
            ),
            None => format!(
                "{}: wait timer of {} min",
                g.environment, g.wait_timer_minutes
            ),
        })
        .collect();
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// Gives the decision for `gate` the way its decider can.
///
/// # Errors
/// `Denied` naming who can decide when flowgate cannot; `NotFound` when GitHub says the
/// deployment is no longer pending (decided meanwhile).
pub(crate) async fn decide(
    api: &Api,
    run: u64,
    key: &str,
    gate: &Gate,
    approve: bool,
    comment: &str,
) -> Result<(), EngineError> {
    let got = match &gate.decider {
        Decider::Reviewer => api.review(run, gate.environment_id, approve, comment).await,
        Decider::App => {
            api.review_custom_gate(run, &gate.environment, approve, comment)
                .await
        }
        Decider::Others(who) => {
            return Err(EngineError::Denied {
                engine: KIND,
                message: format!(
                    "flowgate cannot review the deployment to {}: {who} must review it in GitHub",
                    gate.environment
                ),
            });
        }
    };
    match got {
        // 422: reviewed meanwhile (in GitHub's UI) or no longer pending; or, when flowgate's
        // token user started the run and the environment still waits, refused as a
        // self-review.
        Err(EngineError::InvalidInput { .. }) => {
            if let Some(me) = &gate.started_by_reviewer
                && approve
                && api
                    .pending_deployments(run)
                    .await
                    .is_ok_and(|p| p.iter().any(|p| p.environment.id == gate.environment_id))
            {
                return Err(EngineError::Denied {
                    engine: KIND,
                    message: format!(
                        "GitHub refused flowgate's approval of the deployment to {}, which \
                         still waits: @{me}, flowgate's token, started the run, and with the \
                         environment's \"Prevent self-review\" on GitHub lets nobody approve a \
                         run they started; another reviewer must approve it in GitHub",
                        gate.environment
                    ),
                });
            }
            Err(EngineError::NotFound {
                engine: KIND,
                what: format!("question {key} (no longer pending)"),
            })
        }
        other => other,
    }
}

/// A run's rejected deployments, from its reviews: who rejected which environment, and why.
pub(crate) fn rejections(approvals: &[Approval]) -> Option<(String, Option<String>)> {
    let rejected: Vec<&Approval> = approvals.iter().filter(|a| a.state == "rejected").collect();
    if rejected.is_empty() {
        return None;
    }
    let error = rejected
        .iter()
        .map(|a| {
            let envs: Vec<String> = a
                .environments
                .iter()
                .map(|e| e.name.clone().unwrap_or_else(|| e.id.to_string()))
                .collect();
            let by = a
                .user
                .as_ref()
                .map(|u| format!(" by @{}", u.login))
                .unwrap_or_default();
            format!("the deployment to {} was rejected{by}", envs.join(", "))
        })
        .collect::<Vec<_>>()
        .join("; ");
    let comments: Vec<String> = rejected
        .iter()
        .filter_map(|a| a.comment.as_deref().filter(|c| !c.is_empty()))
        .map(str::to_owned)
        .collect();
    Some((error, (!comments.is_empty()).then(|| comments.join("\n"))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_parse_strictly() {
        assert_eq!(parse_question_key(&question_key(77, 0)), Some((77, 0)));
        assert_eq!(parse_question_key("env-77-0"), None);
        assert_eq!(parse_question_key("never-asked"), None);
    }

    #[test]
    fn a_rejection_names_the_environment_the_reviewer_and_the_comment() {
        let approvals: Vec<Approval> = serde_json::from_value(json!([
            {"environments": [{"id": 1, "name": "production"}], "state": "approved", "comment": "ok",
             "user": {"login": "bob"}},
            {"environments": [{"id": 2, "name": "eu"}], "state": "rejected", "comment": "not today",
             "user": {"login": "alice"}}
        ]))
        .expect("approvals");
        let (error, cause) = rejections(&approvals).expect("a rejection");
        assert_eq!(error, "the deployment to eu was rejected by @alice");
        assert_eq!(cause.as_deref(), Some("not today"));
        assert!(rejections(&approvals[..1]).is_none());
    }
}
