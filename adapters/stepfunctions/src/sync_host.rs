//! `StartSyncExecution` is sent to `sync-<endpoint host>`; with a configured `endpoint_url`
//! (an emulator, a proxy) that host does not exist. This interceptor sends it to the configured
//! host itself. It runs after signing, which emulators do not verify; it is installed only
//! when `endpoint_url` is set, so calls to AWS itself are untouched.

use aws_sdk_sfn::config::interceptors::BeforeTransmitInterceptorContextMut;
use aws_sdk_sfn::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_sfn::error::BoxError;

#[derive(Debug)]
pub(crate) struct SameHostForSync;

impl Intercept for SameHostForSync {
    fn name(&self) -> &'static str {
        "SameHostForSync"
    }

    fn modify_before_transmit(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let uri = context.request().uri().to_owned();
        if uri.contains("://sync-") {
            context
                .request_mut()
                .set_uri(uri.replacen("://sync-", "://", 1))?;
        }
        Ok(())
    }
}
