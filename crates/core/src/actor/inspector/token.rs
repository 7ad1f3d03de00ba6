//! The actor's inspector token: created on its first start and kept at the
//! exact actor-KV key `[3]`, where the dashboard reads it through the
//! engine. Scheduled events share the `[3, ..]` prefix, so their prefix
//! scan skips that exact key.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

use crate::actor::context::ActorContext;
use crate::actor::keys::INSPECTOR_TOKEN as TOKEN_KEY;
/// Random bytes in a token (base64url without padding on the wire).
const TOKEN_BYTES: usize = 32;

/// Loads the actor's token, creating and storing one if it has none yet.
pub async fn ensure_token(ctx: &ActorContext) -> anyhow::Result<()> {
    let stored = ctx.link().kv_get(ctx.actor_id(), vec![TOKEN_KEY.to_vec()]).await?;
    let existing = stored
        .into_iter()
        .next()
        .flatten()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|token| !token.is_empty());
    let token = match existing {
        Some(token) => token,
        None => {
            let token = generate_token()?;
            ctx.link()
                .kv_put(ctx.actor_id(), vec![(TOKEN_KEY.to_vec(), token.as_bytes().to_vec())], ctx.lost_token().clone())
                .await?;
            tracing::debug!(actor_id = %ctx.actor_id(), "created the actor's inspector token");
            token
        }
    };
    ctx.inspector().set_token(token);
    Ok(())
}

fn generate_token() -> anyhow::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::getrandom(&mut bytes).map_err(|err| anyhow::anyhow!("no randomness for the inspector token: {err}"))?;
    Ok(URL_SAFE_NO_PAD.encode(bytes))
}
