//! The leader key's value: the leader's identity and a proof that a node
//! holding the cluster secret wrote it, under that very lease. A follower
//! forwards admin calls (with the operator's token) and redirects regions
//! only to a leader whose claim it has verified: a key written into etcd by
//! anyone else — with an attacker's URL — names no leader.
//!
//! The proof is HMAC-SHA256 of the claim's version, the lease the key is
//! attached to, the name and the URL, keyed with the cluster secret
//! (`--cluster-secret-file`, the same on every node). Binding the lease
//! means a claim copied onto another lease does not verify.

use std::path::Path;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::NodeIdentity;

/// The shortest cluster secret accepted, in bytes.
pub const MIN_SECRET_BYTES: usize = 16;

/// What the proof is computed over first: the claim's format.
const DOMAIN: &str = "shardalloc leader claim v1";

/// The secret the nodes of one cluster share. Its bytes are never shown.
#[derive(Clone)]
pub struct ClusterSecret(Arc<Vec<u8>>);

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

impl ClusterSecret {
    /// A secret of at least [`MIN_SECRET_BYTES`] bytes (surrounding
    /// whitespace, such as a file's last newline, is not part of it).
    pub fn new(bytes: &[u8]) -> Result<Self, String> {
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "the cluster secret has {} bytes; it needs at least {MIN_SECRET_BYTES} (e.g. `openssl rand -hex 32`)",
                trimmed.len()
            ));
        }
        Ok(ClusterSecret(Arc::new(trimmed.to_vec())))
    }

    /// The secret in `path`.
    pub fn from_file(path: &Path) -> Result<Self, String> {
        let bytes = std::fs::read(path)
            .map_err(|error| format!("cannot read the cluster secret {}: {error}", path.display()))?;
        Self::new(&bytes).map_err(|error| format!("{}: {error}", path.display()))
    }

    fn mac(&self, identity: &NodeIdentity, lease: i64) -> Hmac<Sha256> {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        for part in [DOMAIN, &lease.to_string(), &identity.name, &identity.url] {
            mac.update(&(part.len() as u64).to_le_bytes());
            mac.update(part.as_bytes());
        }
        mac
    }
}

/// The leader key's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct LeaderClaim {
    name: String,
    url: String,
    /// Hex HMAC-SHA256; see the module documentation.
    #[serde(default)]
    proof: String,
}

/// The value a node writes when it claims the key under `lease`.
pub fn claim(identity: &NodeIdentity, lease: i64, secret: &ClusterSecret) -> Vec<u8> {
    let proof = hex(&secret.mac(identity, lease).finalize().into_bytes());
    let claim = LeaderClaim { name: identity.name.clone(), url: identity.url.clone(), proof };
    serde_json::to_vec(&claim).expect("a claim serializes")
}

/// The leader a key's `value` under `lease` names, once its proof holds.
pub fn verify(value: &[u8], lease: i64, secret: &ClusterSecret) -> Result<NodeIdentity, String> {
    let claim: LeaderClaim =
        serde_json::from_slice(value).map_err(|error| format!("the leader key holds no leader claim: {error}"))?;
    let identity = NodeIdentity { name: claim.name, url: claim.url };
    let proof = unhex(&claim.proof).ok_or_else(|| {
        format!(
            "the leader key naming {} ({}) carries no proof: it was not written by a node of this cluster",
            identity.name, identity.url
        )
    })?;
    secret.mac(&identity, lease).verify_slice(&proof).map_err(|_| {
        format!(
            "the leader key naming {} ({}) is not signed with this cluster's secret (another cluster on the same \
             etcd prefix, a different --cluster-secret-file, or tampering)",
            identity.name, identity.url
        )
    })?;
    Ok(identity)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.is_empty() || !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, url: &str) -> NodeIdentity {
        NodeIdentity { name: name.into(), url: url.into() }
    }

    #[test]
    fn a_claim_verifies_only_with_the_same_secret_and_lease() {
        let secret = ClusterSecret::new(b"0123456789abcdef0123\n").unwrap();
        let me = node("n0", "https://n0.shardalloc:7878");
        let value = claim(&me, 42, &secret);
        assert_eq!(verify(&value, 42, &secret).unwrap(), me);
        assert!(verify(&value, 43, &secret).unwrap_err().contains("not signed"), "another lease");
        let other = ClusterSecret::new(b"another secret of this cluster").unwrap();
        assert!(verify(&value, 42, &other).unwrap_err().contains("not signed"), "another secret");
    }

    #[test]
    fn a_forged_or_altered_claim_names_no_leader() {
        let secret = ClusterSecret::new(b"0123456789abcdef").unwrap();
        let forged = br#"{"name":"attacker","url":"http://203.0.113.9"}"#;
        assert!(verify(forged, 7, &secret).unwrap_err().contains("carries no proof"));
        let value = claim(&node("n0", "https://n0:7878"), 7, &secret);
        let altered = String::from_utf8(value).unwrap().replace("https://n0:7878", "https://evil:7878");
        assert!(verify(altered.as_bytes(), 7, &secret).unwrap_err().contains("not signed"));
        assert!(verify(b"not json", 7, &secret).unwrap_err().contains("no leader claim"));
    }

    #[test]
    fn a_short_secret_is_refused_naming_the_minimum() {
        let error = ClusterSecret::new(b"short\n").unwrap_err();
        assert!(error.contains("at least 16"), "{error}");
    }
}
