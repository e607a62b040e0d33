//! Where the handle keys come from: an environment variable, a file (a secret mounted by Cloud
//! Run or Kubernetes), an SSM parameter or a Secrets Manager secret (Lambda). Exactly one source
//! may be set. The keys never reach a log line: errors name the source, never its content.

use flowgate_core::handle::{HandleKey, Keyring};

use crate::env_vars;

/// Loads the keyring from the one configured source, or makes a random development key.
pub(crate) async fn load() -> Result<Keyring, String> {
    let sources = [
        env_vars::HANDLE_KEYS,
        env_vars::HANDLE_KEYS_FILE,
        env_vars::HANDLE_KEYS_SSM,
        env_vars::HANDLE_KEYS_SECRET,
    ];
    let set: Vec<(&str, String)> = sources
        .iter()
        .filter_map(|name| {
            std::env::var(name)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (*name, v))
        })
        .collect();
    let (name, value) = match set.as_slice() {
        [] => {
            tracing::warn!(
                "no handle keys are configured ({}): task handles are sealed with a random key, so \
                 they stop opening when this process ends. Set one for any deployment.",
                sources.join(", ")
            );
            let key = HandleKey::random("dev").map_err(|e| e.to_string())?;
            return Ok(Keyring::new(key, Vec::new()));
        }
        [one] => one.clone(),
        many => {
            let names: Vec<&str> = many.iter().map(|(n, _)| *n).collect();
            return Err(format!(
                "set only one handle key source; found {}",
                names.join(" and ")
            ));
        }
    };
    let spec = match name {
        env_vars::HANDLE_KEYS => value,
        env_vars::HANDLE_KEYS_FILE => std::fs::read_to_string(&value)
            .map_err(|e| format!("{name}: cannot read {value}: {e}"))?,
        _ => fetch_aws(name, &value).await?,
    };
    let keyring = Keyring::parse(spec.trim()).map_err(|e| format!("{name}: {e}"))?;
    tracing::info!(
        source = name,
        key_id = keyring.current_id(),
        "handle keys loaded"
    );
    Ok(keyring)
}

#[cfg(feature = "aws-secrets")]
async fn fetch_aws(name: &str, id: &str) -> Result<String, String> {
    let conf = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    if name == env_vars::HANDLE_KEYS_SSM {
        let out = aws_sdk_ssm::Client::new(&conf)
            .get_parameter()
            .name(id)
            .with_decryption(true)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "{name}: cannot read SSM parameter {id}: {}",
                    aws_sdk_ssm::error::DisplayErrorContext(e)
                )
            })?;
        out.parameter
            .and_then(|p| p.value)
            .ok_or_else(|| format!("{name}: SSM parameter {id} has no value"))
    } else {
        let out = aws_sdk_secretsmanager::Client::new(&conf)
            .get_secret_value()
            .secret_id(id)
            .send()
            .await
            .map_err(|e| {
                format!(
                    "{name}: cannot read secret {id}: {}",
                    aws_sdk_secretsmanager::error::DisplayErrorContext(e)
                )
            })?;
        out.secret_string
            .ok_or_else(|| format!("{name}: secret {id} has no string value"))
    }
}

#[cfg(not(feature = "aws-secrets"))]
async fn fetch_aws(name: &str, _id: &str) -> Result<String, String> {
    Err(format!(
        "{name}: this build has no AWS secret support (cargo feature aws-secrets)"
    ))
}
