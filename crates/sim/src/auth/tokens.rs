//! ServiceAccount tokens: issued by `TokenRequest`, recognised by `TokenReview`.
//!
//! kube-apiserver signs JWTs and can verify them without state. The simulator has no key to sign
//! with and needs none: it hands out opaque random tokens and remembers whom each one names. A
//! token is accepted while it has not expired, its audiences match the review's, and the
//! ServiceAccount it was issued for still exists with the same uid (deleting the account revokes
//! its tokens, as it does for bound tokens upstream). Tokens live in memory only: a restarted
//! simulator knows none. The randomness is the simulator's fast generator, not a cryptographic
//! one: these tokens protect test traffic, not a cluster.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use parking_lot::Mutex;

use crate::util::random_u64;

/// The audience of tokens requested without audiences, and the audience a review without
/// audiences checks against (kube-apiserver's default `--api-audiences`).
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// The lifetime of a token requested without `expirationSeconds` (one hour, as upstream).
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime a `TokenRequest` may ask for (ten minutes, as upstream).
pub const MIN_EXPIRATION_SECONDS: i64 = 600;

/// The user a token authenticates as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenUser {
    /// `system:serviceaccount:<namespace>:<name>`.
    pub username: String,
    /// The ServiceAccount's uid.
    pub uid: String,
    /// `system:serviceaccounts`, `system:serviceaccounts:<namespace>`, `system:authenticated`.
    pub groups: Vec<String>,
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub service_account: String,
}

impl TokenUser {
    /// The identity of a ServiceAccount, named and grouped as kube-apiserver names it.
    pub fn service_account(namespace: &str, name: &str, uid: &str) -> Self {
        TokenUser {
            username: format!("system:serviceaccount:{namespace}:{name}"),
            uid: uid.to_string(),
            groups: vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".to_string(),
            ],
            namespace: namespace.to_string(),
            service_account: name.to_string(),
        }
    }
}

/// A token handed out, with whom it names.
#[derive(Clone, Debug)]
pub struct IssuedToken {
    /// The bearer token.
    pub token: String,
    /// When it stops being accepted.
    pub expires: Timestamp,
    /// The audiences it is valid for.
    pub audiences: Vec<String>,
    /// The user it authenticates as.
    pub user: TokenUser,
}

/// The tokens this simulator issued. Cloning shares them.
#[derive(Clone, Debug, Default)]
pub struct TokenAuthority {
    issued: Arc<Mutex<HashMap<String, IssuedToken>>>,
}

impl TokenAuthority {
    /// Issues a token for `user`, valid `lifetime_seconds` from `now` for `audiences` (the API
    /// audience when empty).
    pub fn issue(
        &self,
        user: TokenUser,
        audiences: Vec<String>,
        lifetime_seconds: i64,
        now: Timestamp,
    ) -> IssuedToken {
        let token = format!(
            "unisched-sim.{:016x}{:016x}{:016x}{:016x}",
            random_u64(),
            random_u64(),
            random_u64(),
            random_u64()
        );
        let audiences = if audiences.is_empty() {
            vec![API_AUDIENCE.to_string()]
        } else {
            audiences
        };
        let expires = now
            .checked_add(SignedDuration::from_secs(lifetime_seconds))
            .unwrap_or(Timestamp::MAX);
        let issued = IssuedToken {
            token: token.clone(),
            expires,
            audiences,
            user,
        };
        let mut tokens = self.issued.lock();
        tokens.retain(|_, t| t.expires > now);
        tokens.insert(token, issued.clone());
        issued
    }

    /// The token, if this simulator issued it and it has not expired at `now`. Audiences and the
    /// account's existence are the reviewer's to check.
    pub fn lookup(&self, token: &str, now: Timestamp) -> Option<IssuedToken> {
        self.issued.lock().get(token).filter(|t| t.expires > now).cloned()
    }
}

/// The audiences a review grants: the intersection of the token's with the requested ones (the
/// API audience when the review names none). Empty means the token is not for this audience.
pub fn granted_audiences(token: &IssuedToken, requested: &[String]) -> Vec<String> {
    let requested: Vec<String> = if requested.is_empty() {
        vec![API_AUDIENCE.to_string()]
    } else {
        requested.to_vec()
    };
    requested
        .into_iter()
        .filter(|a| token.audiences.contains(a))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issued_tokens_are_known_until_they_expire() {
        let authority = TokenAuthority::default();
        let now = Timestamp::from_second(1_000_000).unwrap();
        let user = TokenUser::service_account("monitoring", "prometheus", "uid-1");
        let issued = authority.issue(user.clone(), Vec::new(), 600, now);
        assert_eq!(user.username, "system:serviceaccount:monitoring:prometheus");
        assert!(
            user.groups
                .contains(&"system:serviceaccounts:monitoring".to_string())
        );
        let found = authority.lookup(&issued.token, now).unwrap();
        assert_eq!(found.user, user);
        assert_eq!(granted_audiences(&found, &[]), vec![API_AUDIENCE.to_string()]);
        assert!(granted_audiences(&found, &["other".to_string()]).is_empty());
        assert!(authority.lookup("not-a-token", now).is_none());
        let later = now.checked_add(SignedDuration::from_secs(600)).unwrap();
        assert!(authority.lookup(&issued.token, later).is_none());
    }

    #[test]
    fn every_token_is_different() {
        let authority = TokenAuthority::default();
        let now = Timestamp::from_second(1_000_000).unwrap();
        let user = TokenUser::service_account("a", "b", "u");
        let one = authority.issue(user.clone(), Vec::new(), 3600, now);
        let two = authority.issue(user, vec!["x".into()], 3600, now);
        assert_ne!(one.token, two.token);
        assert_eq!(two.audiences, vec!["x".to_string()]);
    }
}
