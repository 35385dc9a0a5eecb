//! lockd's own routes: each path and method is written here once, and the
//! server's router and every client read them from [`Route`].

use std::fmt;

/// One of lockd's own routes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Route {
    /// `POST /v1/locks/lock`: `LockRequest`.
    Lock,
    /// `POST /v1/locks/unlock`: `UnlockRequest`.
    Unlock,
    /// `POST /v1/locks/extend`: `ExtendRequest`.
    Extend,
    /// `POST /v1/locks/get`: `GetRequest`.
    Get,
    /// `GET /v1/locks`: `ListQuery`.
    List,
    /// `POST /v1/locks/force-unlock`:
    /// `ForceUnlockRequest`.
    ForceUnlock,
    /// `POST /v1/admin/snapshot`, no body: a snapshot of the server's redb
    /// store, its file's bytes (`application/octet-stream`).
    Snapshot,
    /// `GET /v1/events`, Server-Sent Events: `EventQuery`.
    Events,
    /// `GET /v1/namespaces`: the namespaces the caller may see, with
    /// their held locks and waiters (`NamespacesReply`).
    Namespaces,
    /// `POST /v1/leases/grant`: `LeaseGrantRequest`.
    LeaseGrant,
    /// `POST /v1/leases/refresh`: `LeaseRequest`.
    LeaseRefresh,
    /// `POST /v1/leases/revoke`: `LeaseRequest`.
    LeaseRevoke,
    /// `POST /v1/leases/get`: `LeaseRequest`.
    LeaseGet,
    /// `POST /v1/elections/campaign`: `CampaignRequest`.
    Campaign,
    /// `POST /v1/elections/proclaim`: `ProclaimRequest`.
    Proclaim,
    /// `POST /v1/elections/resign`: `ResignRequest`.
    Resign,
    /// `POST /v1/elections/leader`: `LeaderRequest`.
    Leader,
    /// `GET /metrics`, Prometheus text.
    Metrics,
    /// `GET /healthz`.
    Healthz,
    /// `GET /livez`: the process serves (`StatusReply` `ok`).
    Livez,
    /// `GET /readyz`: whether to send it requests (`ReadyReply`).
    Readyz,
    /// `GET /openapi.json`, the API's OpenAPI document.
    OpenApi,
}

/// The HTTP method of a [`Route`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Method {
    /// `GET`
    Get,
    /// `POST`
    Post,
}

impl Method {
    /// `GET` or `POST`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Post => "POST",
        }
    }
}

impl fmt::Display for Method {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Route {
    /// Every route.
    pub const ALL: [Route; 22] = [
        Route::Lock,
        Route::Unlock,
        Route::Extend,
        Route::Get,
        Route::List,
        Route::ForceUnlock,
        Route::Snapshot,
        Route::Events,
        Route::Namespaces,
        Route::LeaseGrant,
        Route::LeaseRefresh,
        Route::LeaseRevoke,
        Route::LeaseGet,
        Route::Campaign,
        Route::Proclaim,
        Route::Resign,
        Route::Leader,
        Route::Metrics,
        Route::Healthz,
        Route::Livez,
        Route::Readyz,
        Route::OpenApi,
    ];

    /// The path, without a query.
    pub const fn path(self) -> &'static str {
        match self {
            Route::Lock => "/v1/locks/lock",
            Route::Unlock => "/v1/locks/unlock",
            Route::Extend => "/v1/locks/extend",
            Route::Get => "/v1/locks/get",
            Route::List => "/v1/locks",
            Route::ForceUnlock => "/v1/locks/force-unlock",
            Route::Snapshot => "/v1/admin/snapshot",
            Route::Events => "/v1/events",
            Route::Namespaces => "/v1/namespaces",
            Route::LeaseGrant => "/v1/leases/grant",
            Route::LeaseRefresh => "/v1/leases/refresh",
            Route::LeaseRevoke => "/v1/leases/revoke",
            Route::LeaseGet => "/v1/leases/get",
            Route::Campaign => "/v1/elections/campaign",
            Route::Proclaim => "/v1/elections/proclaim",
            Route::Resign => "/v1/elections/resign",
            Route::Leader => "/v1/elections/leader",
            Route::Metrics => "/metrics",
            Route::Healthz => "/healthz",
            Route::Livez => "/livez",
            Route::Readyz => "/readyz",
            Route::OpenApi => "/openapi.json",
        }
    }

    /// The one method the route takes.
    pub const fn method(self) -> Method {
        match self {
            Route::Lock
            | Route::Unlock
            | Route::Extend
            | Route::Get
            | Route::ForceUnlock
            | Route::Snapshot
            | Route::LeaseGrant
            | Route::LeaseRefresh
            | Route::LeaseRevoke
            | Route::LeaseGet
            | Route::Campaign
            | Route::Proclaim
            | Route::Resign
            | Route::Leader => Method::Post,
            Route::List
            | Route::Events
            | Route::Namespaces
            | Route::Metrics
            | Route::Healthz
            | Route::Livez
            | Route::Readyz
            | Route::OpenApi => Method::Get,
        }
    }

    /// The route whose path is `path` (without a query).
    pub fn from_path(path: &str) -> Option<Route> {
        Route::ALL.into_iter().find(|route| route.path() == path)
    }
}

/// `POST /v1/locks/lock`: the method and path, as messages name a route.
impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method(), self.path())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_is_found_by_its_path() {
        let mut paths = std::collections::HashSet::new();
        for route in Route::ALL {
            assert!(paths.insert(route.path()), "{route} twice");
            assert_eq!(Route::from_path(route.path()), Some(route));
        }
        assert_eq!(Route::from_path("/v1/locks/"), None);
        assert_eq!(Route::from_path("/v1/locks?prefix=a"), None);
        assert_eq!(Route::Lock.to_string(), "POST /v1/locks/lock");
        assert_eq!(Route::List.to_string(), "GET /v1/locks");
    }
}
