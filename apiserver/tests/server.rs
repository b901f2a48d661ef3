//! The API server through its public API only: kube-rs's watcher as a real client (with and
//! without streaming lists), raw HTTP for the wire details (410, selectors, errors, events,
//! pagination), and serving inside a network namespace (needs root).

use apiserver::{kubeconfig, ApiServer, ChangeType, ClusterObjects, API_PORT};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Node, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

const PROXY_NAME: &str = "service.kubernetes.io/service-proxy-name";

fn meta(name: &str, namespace: Option<&str>, labels: &[(&str, &str)]) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                .collect::<BTreeMap<_, _>>()
        }),
        ..Default::default()
    }
}

fn service(name: &str, ip: &str, port: i32, labels: &[(&str, &str)]) -> Service {
    Service {
        metadata: meta(name, Some("default"), labels),
        spec: Some(ServiceSpec {
            cluster_ip: Some(ip.into()),
            ports: Some(vec![ServicePort {
                port,
                ..Default::default()
            }]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn slice(service: &str, ip: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: meta(
            &format!("{service}-abc"),
            Some("default"),
            &[("kubernetes.io/service-name", service)],
        ),
        address_type: "IPv4".into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![ip.into()],
            ..Default::default()
        }]),
        ports: None,
    }
}

/// A small cluster: two proxied Services, one headless, one for another proxier; slices.
fn cluster() -> ClusterObjects {
    ClusterObjects {
        namespaces: vec![Namespace {
            metadata: meta("default", None, &[]),
            ..Default::default()
        }],
        nodes: vec![
            Node {
                metadata: meta("node-a", None, &[]),
                ..Default::default()
            },
            Node {
                metadata: meta("node-b", None, &[]),
                ..Default::default()
            },
        ],
        services: vec![
            service("web", "10.96.0.10", 80, &[("app", "web")]),
            service("db", "10.96.0.11", 5432, &[("app", "db")]),
            service("headless", "None", 80, &[]),
            service("other", "10.96.0.12", 80, &[(PROXY_NAME, "other")]),
        ],
        endpoint_slices: vec![slice("web", "10.244.1.2"), slice("db", "10.244.1.3")],
        ..Default::default()
    }
}

/// The cluster after a change: web's port changes, db goes, api comes.
fn changed_cluster() -> ClusterObjects {
    let mut c = cluster();
    c.services = vec![
        service("web", "10.96.0.10", 8080, &[("app", "web")]),
        service("api", "10.96.0.13", 443, &[("app", "api")]),
        service("headless", "None", 80, &[]),
        service("other", "10.96.0.12", 80, &[(PROXY_NAME, "other")]),
    ];
    c.endpoint_slices = vec![slice("web", "10.244.1.9"), slice("api", "10.244.1.4")];
    c
}

fn serve(objects: ClusterObjects) -> (ApiServer, SocketAddr) {
    let server = ApiServer::start(objects).expect("start the API server");
    let addr = server
        .listen_on("127.0.0.1:0".parse().unwrap(), "test")
        .expect("listen");
    (server, addr)
}

// ---- raw HTTP ----

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Response {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
}

fn send(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: kpct\r\nUser-Agent: kpct-test\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        req.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    req.push_str("\r\n");
    req.push_str(body.unwrap_or_default());
    stream.write_all(req.as_bytes()).expect("send request");
}

/// Reads the status line and headers.
fn head(reader: &mut BufReader<TcpStream>) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).expect("status line");
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).expect("header");
        let l = line.trim_end();
        if l.is_empty() {
            return (status, headers);
        }
        if let Some((k, v)) = l.split_once(':') {
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
}

/// Reads one chunk of a chunked body; None at its end.
fn chunk(reader: &mut BufReader<TcpStream>) -> Option<Vec<u8>> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let size = usize::from_str_radix(line.trim(), 16).ok()?;
    let mut data = vec![0; size + 2];
    reader.read_exact(&mut data).ok()?;
    data.truncate(size);
    (size > 0).then_some(data)
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Response {
    let mut stream = connect(addr);
    send(&mut stream, method, path, headers, body);
    let mut reader = BufReader::new(stream);
    let (status, headers) = head(&mut reader);
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut body = Vec::new();
    if get("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        while let Some(data) = chunk(&mut reader) {
            body.extend(data);
        }
    } else {
        let len: usize = get("content-length")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        body.resize(len, 0);
        reader.read_exact(&mut body).expect("body");
    }
    Response {
        status,
        headers,
        body: String::from_utf8(body).expect("UTF-8 body"),
    }
}

fn get(addr: SocketAddr, path: &str) -> Response {
    request(addr, "GET", path, &[], None)
}

/// An open watch stream, read event by event.
struct Watch {
    reader: BufReader<TcpStream>,
    buffered: Vec<u8>,
    status: u16,
}

impl Watch {
    fn open(addr: SocketAddr, path: &str) -> Watch {
        let mut stream = connect(addr);
        send(&mut stream, "GET", path, &[], None);
        let mut reader = BufReader::new(stream);
        let (status, _) = head(&mut reader);
        Watch {
            reader,
            buffered: Vec::new(),
            status,
        }
    }

    /// The next event, or None when the stream ends (or nothing comes for 10 s).
    fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buffered.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffered.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).expect("an event is one JSON line"));
            }
            self.buffered.extend(chunk(&mut self.reader)?);
        }
    }
}

fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}

fn rv_of(v: &Value) -> u64 {
    v["metadata"]["resourceVersion"]
        .as_str()
        .expect("resourceVersion")
        .parse()
        .unwrap()
}

// ---- kube-rs ----

async fn watch_with_kube(streaming: bool) {
    let (server, addr) = serve(cluster());
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    let client = kube::Client::try_from(config).expect("kube client");
    let mut svc_cfg = kube::runtime::watcher::Config::default()
        .labels(&format!("!{PROXY_NAME}"))
        .fields("spec.clusterIP!=None")
        .timeout(30);
    let mut eps_cfg = kube::runtime::watcher::Config::default().timeout(30);
    if streaming {
        svc_cfg = svc_cfg.streaming_lists();
        eps_cfg = eps_cfg.streaming_lists();
    }
    let services =
        kube::runtime::watcher(kube::Api::<Service>::all(client.clone()), svc_cfg).boxed();
    let slices = kube::runtime::watcher(kube::Api::<EndpointSlice>::all(client), eps_cfg).boxed();
    let mut services = Seen::new(services);
    let mut slices = Seen::new(slices);
    assert_eq!(
        services.initial().await,
        ["db", "web"],
        "the proxied, non-headless Services"
    );
    assert_eq!(slices.initial().await, ["db-abc", "web-abc"]);

    let publication = server.publish(changed_cluster()).unwrap();
    let kinds: Vec<_> = publication
        .changes
        .iter()
        .map(|c| (c.kind, c.name.as_str(), c.change))
        .collect();
    assert_eq!(
        kinds,
        [
            ("Service", "api", ChangeType::Added),
            ("Service", "web", ChangeType::Modified),
            ("EndpointSlice", "api-abc", ChangeType::Added),
            ("EndpointSlice", "web-abc", ChangeType::Modified),
            ("EndpointSlice", "db-abc", ChangeType::Deleted),
            ("Service", "db", ChangeType::Deleted),
        ]
    );
    assert_eq!(
        services.changes(3).await,
        ["apply api", "apply web", "delete db"]
    );
    let web = services.last_applied.get("web").unwrap();
    assert_eq!(
        web.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
        8080
    );
    assert_eq!(
        slices.changes(3).await,
        ["apply api-abc", "apply web-abc", "delete db-abc"]
    );

    let requests = server.requests();
    let watch_lists = requests
        .iter()
        .filter(|r| r.path.contains("sendInitialEvents=true"))
        .count();
    let lists = requests
        .iter()
        .filter(|r| !r.path.contains("watch="))
        .count();
    if streaming {
        assert_eq!((watch_lists, lists), (2, 0), "{requests:#?}");
    } else {
        assert_eq!((watch_lists, lists), (0, 2), "{requests:#?}");
    }
    assert!(requests.iter().all(|r| r.status == 200), "{requests:#?}");
}

/// What a kube-rs watcher reported, by object name.
struct Seen<K> {
    stream: futures::stream::BoxStream<
        'static,
        kube::runtime::watcher::Result<kube::runtime::watcher::Event<K>>,
    >,
    last_applied: BTreeMap<String, K>,
}

impl<K: kube::Resource> Seen<K> {
    fn new(
        stream: futures::stream::BoxStream<
            'static,
            kube::runtime::watcher::Result<kube::runtime::watcher::Event<K>>,
        >,
    ) -> Self {
        Seen {
            stream,
            last_applied: BTreeMap::new(),
        }
    }

    async fn next(&mut self) -> kube::runtime::watcher::Event<K> {
        match tokio::time::timeout(Duration::from_secs(20), self.stream.next()).await {
            Ok(Some(Ok(event))) => event,
            Ok(other) => panic!("watcher ended or failed: {:?}", other.map(|r| r.err())),
            Err(_) => panic!("no watcher event within 20 s"),
        }
    }

    /// The names of the initial objects, once the watcher says its initial list is done.
    async fn initial(&mut self) -> Vec<String> {
        use kube::runtime::watcher::Event;
        let mut names = Vec::new();
        loop {
            match self.next().await {
                Event::Init => names.clear(),
                Event::InitApply(o) => names.push(o.meta().name.clone().unwrap_or_default()),
                Event::InitDone => {
                    names.sort();
                    return names;
                }
                _ => panic!("a change before the initial list ended"),
            }
        }
    }

    /// The next `n` changes, as `apply NAME` / `delete NAME`, sorted.
    async fn changes(&mut self, n: usize) -> Vec<String> {
        use kube::runtime::watcher::Event;
        let mut seen = Vec::new();
        while seen.len() < n {
            match self.next().await {
                Event::Apply(o) => {
                    let name = o.meta().name.clone().unwrap_or_default();
                    seen.push(format!("apply {name}"));
                    self.last_applied.insert(name, o);
                }
                Event::Delete(o) => seen.push(format!(
                    "delete {}",
                    o.meta().name.clone().unwrap_or_default()
                )),
                other => panic!(
                    "expected a change, got a relist: {}",
                    matches!(other, Event::Init)
                ),
            }
        }
        seen.sort();
        seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_list_then_watch_sees_the_state_and_its_changes() {
    watch_with_kube(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_rs_streaming_list_sees_the_state_and_its_changes() {
    watch_with_kube(true).await;
}

// ---- wire details ----

#[test]
fn watch_list_streams_the_state_then_an_annotated_bookmark() {
    let (server, addr) = serve(cluster());
    let mut w = Watch::open(
        addr,
        "/apis/discovery.k8s.io/v1/endpointslices?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true",
    );
    assert_eq!(w.status, 200);
    let mut added = Vec::new();
    let bookmark = loop {
        let e = w.next().expect("an event");
        assert_eq!(e["object"]["kind"], "EndpointSlice", "{e}");
        assert_eq!(e["object"]["apiVersion"], "discovery.k8s.io/v1");
        match e["type"].as_str() {
            Some("ADDED") => added.push(
                e["object"]["metadata"]["name"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            ),
            Some("BOOKMARK") => break e,
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(added, ["db-abc", "web-abc"]);
    assert_eq!(
        bookmark["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"],
        "true"
    );
    let list = get(addr, "/apis/discovery.k8s.io/v1/endpointslices").json();
    assert_eq!(rv_of(&bookmark["object"]), rv_of(&list));
    server.publish(changed_cluster()).unwrap();
    let e = w.next().expect("a live event");
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("ADDED"), Some("api-abc"))
    );

    // Without resourceVersionMatch=NotOlderThan the real server refuses it.
    let bad = get(addr, "/api/v1/services?watch=true&sendInitialEvents=true");
    assert_eq!(bad.status, 422);
    assert_eq!(bad.json()["reason"], "Invalid");
}

#[test]
fn compaction_turns_old_resource_versions_into_410() {
    let (server, addr) = serve(cluster());
    let first = get(addr, "/api/v1/services?limit=2");
    let token = first.json()["metadata"]["continue"]
        .as_str()
        .expect("a continue token")
        .to_string();
    let old_rv = rv_of(&first.json());
    server.publish(changed_cluster()).unwrap();
    // Before compaction the old state is still there.
    let mut w = Watch::open(
        addr,
        &format!("/api/v1/services?watch=true&resourceVersion={old_rv}"),
    );
    assert_eq!(w.next().expect("an event")["type"], "ADDED");
    server.compact();

    let mut w = Watch::open(
        addr,
        &format!("/api/v1/services?watch=true&resourceVersion={old_rv}&allowWatchBookmarks=true"),
    );
    assert_eq!(
        w.status, 200,
        "the real server answers 200 and an ERROR event"
    );
    let e = w.next().expect("an ERROR event");
    assert_eq!(e["type"], "ERROR");
    assert_eq!(
        (e["object"]["kind"].as_str(), e["object"]["code"].as_i64()),
        (Some("Status"), Some(410))
    );
    assert_eq!(e["object"]["reason"], "Expired");
    assert!(w.next().is_none(), "the stream ends after the error");

    let exact = get(
        addr,
        &format!("/api/v1/services?limit=500&resourceVersion={old_rv}"),
    );
    assert_eq!(
        (exact.status, exact.json()["reason"].as_str()),
        (410, Some("Expired"))
    );
    let cont = get(addr, &format!("/api/v1/services?limit=2&continue={token}"));
    assert_eq!(cont.status, 410);
    assert!(
        cont.json()["metadata"]["continue"].is_string(),
        "an inconsistent-continue token: {}",
        cont.body
    );
    // What a relisting reflector does next works.
    assert_eq!(
        get(addr, "/api/v1/services?limit=500&resourceVersion=").status,
        200
    );
}

#[test]
fn selectors_pick_what_kube_proxy_asks_for() {
    let (_server, addr) = serve(cluster());
    let svc = get(addr, "/api/v1/services?labelSelector=%21service.kubernetes.io%2Fservice-proxy-name&fieldSelector=spec.clusterIP%21%3DNone&limit=500&resourceVersion=0");
    assert_eq!(svc.status, 200);
    let list = svc.json();
    assert_eq!(names(&list), ["db", "web"]);
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("ServiceList"), Some("v1"))
    );
    assert!(
        list["items"][0].get("kind").is_none(),
        "list items carry no kind, as the apiserver's"
    );
    let nodes = get(
        addr,
        "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a&limit=500&resourceVersion=0",
    )
    .json();
    assert_eq!(names(&nodes), ["node-a"]);
    let ns_scoped = get(
        addr,
        "/api/v1/namespaces/default/services?labelSelector=app+in+%28web%2Capi%29",
    )
    .json();
    assert_eq!(names(&ns_scoped), ["web"]);
    let elsewhere = get(addr, "/api/v1/namespaces/kube-system/services").json();
    assert_eq!(names(&elsewhere), Vec::<String>::new());

    for (path, code) in [
        ("/api/v1/services?labelSelector=app%3D%3D%3Dx", 400),
        ("/api/v1/services?fieldSelector=spec.ports%3D80", 400),
        ("/api/v1/nodes?fieldSelector=metadata.namespace%3Dx", 400),
    ] {
        let r = get(addr, path);
        assert_eq!(
            (r.status, r.json()["reason"].as_str()),
            (code, Some("BadRequest")),
            "{path}: {}",
            r.body
        );
    }
}

#[test]
fn an_object_leaving_the_selection_is_deleted_for_the_watcher() {
    let (server, addr) = serve(cluster());
    let rv = rv_of(&get(addr, "/api/v1/services").json());
    let mut w = Watch::open(
        addr,
        &format!("/api/v1/services?watch=true&labelSelector=app%3Dweb&resourceVersion={rv}"),
    );
    let mut moved = cluster();
    moved.services[0] = service("web", "10.96.0.10", 80, &[("app", "webby")]);
    let publication = server.publish(moved.clone()).unwrap();
    let e = w.next().expect("an event");
    assert_eq!(
        (e["type"].as_str(), e["object"]["metadata"]["name"].as_str()),
        (Some("DELETED"), Some("web"))
    );
    assert_eq!(rv_of(&e["object"]), publication.resource_version);
    moved.services[0] = service("web", "10.96.0.10", 80, &[("app", "web")]);
    server.publish(moved).unwrap();
    assert_eq!(w.next().expect("an event")["type"], "ADDED");
}

#[test]
fn errors_are_the_apiservers() {
    let (server, addr) = serve(cluster());
    let status = |r: &Response| {
        (
            r.status,
            r.json()["kind"].as_str().map(str::to_string),
            r.json()["reason"].as_str().map(str::to_string),
        )
    };
    let s = |code: u16, reason: &str| (code, Some("Status".to_string()), Some(reason.to_string()));

    let missing = get(addr, "/api/v1/namespaces/default/services/nope");
    assert_eq!(status(&missing), s(404, "NotFound"));
    assert_eq!(missing.json()["message"], "services \"nope\" not found");
    assert_eq!(status(&get(addr, "/api/v1/foobars")), s(404, "NotFound"));
    let outside = get(addr, "/nothing/here");
    assert_eq!(
        (outside.status, outside.body.as_str()),
        (404, "404 page not found\n")
    );

    let proto = request(
        addr,
        "GET",
        "/api/v1/services",
        &[("Accept", "application/vnd.kubernetes.protobuf")],
        None,
    );
    assert_eq!(status(&proto), s(406, "NotAcceptable"));
    let fallback = request(
        addr,
        "GET",
        "/api/v1/services",
        &[("Accept", "application/vnd.kubernetes.protobuf, */*")],
        None,
    );
    assert_eq!(
        (fallback.status, fallback.header("content-type")),
        (200, Some("application/json"))
    );

    let delete = request(
        addr,
        "DELETE",
        "/api/v1/namespaces/default/services/web",
        &[],
        None,
    );
    assert_eq!(status(&delete), s(403, "Forbidden"));
    assert!(delete.json()["message"]
        .as_str()
        .unwrap()
        .contains("cannot delete resource \"services\""));
    let create = request(
        addr,
        "POST",
        "/api/v1/namespaces/default/services",
        &[("Content-Type", "application/json")],
        Some("{}"),
    );
    assert_eq!(status(&create), s(403, "Forbidden"));
    let mut head_req = connect(addr);
    send(&mut head_req, "HEAD", "/api/v1/services", &[], None);
    assert_eq!(
        head(&mut BufReader::new(head_req)).0,
        405,
        "no route for HEAD"
    );

    let event = serde_json::json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": "node-a.1", "namespace": "default"},
        "eventTime": "2026-01-01T00:00:00.000000Z", "reason": "Starting", "action": "StartKubeProxy",
        "reportingController": "kube-proxy", "reportingInstance": "kube-proxy-node-a", "type": "Normal",
        "regarding": {"kind": "Node", "name": "node-a"}
    })
    .to_string();
    let path = "/apis/events.k8s.io/v1/namespaces/default/events";
    let posted = request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        Some(&event),
    );
    assert_eq!(posted.status, 201, "{}", posted.body);
    assert!(posted.json()["metadata"]["uid"].is_string());
    let patch = r#"{"series":{"count":2,"lastObservedTime":"2026-01-01T00:00:10.000000Z"}}"#;
    let patched = request(
        addr,
        "PATCH",
        &format!("{path}/node-a.1"),
        &[("Content-Type", "application/strategic-merge-patch+json")],
        Some(patch),
    );
    assert_eq!(patched.status, 200, "{}", patched.body);
    assert_eq!(patched.json()["series"]["count"], 2);
    let protobuf = request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/vnd.kubernetes.protobuf")],
        Some("\u{6b}\u{38}"),
    );
    assert_eq!(status(&protobuf), s(415, "UnsupportedMediaType"));
    let huge = "x".repeat(3 * 1024 * 1024 + 10);
    assert_eq!(
        status(&request(
            addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            Some(&huge)
        )),
        s(413, "RequestEntityTooLarge")
    );
    let events = server.events();
    assert_eq!(events.len(), 2);
    assert_eq!(
        (events[0].method.as_str(), events[0].body["reason"].as_str()),
        ("POST", Some("Starting"))
    );
    assert_eq!(events[1].method, "PATCH");

    let recorded = server.requests();
    assert!(recorded
        .iter()
        .any(|r| r.status == 406
            && r.accept.as_deref() == Some("application/vnd.kubernetes.protobuf")));
    assert!(recorded
        .iter()
        .all(|r| r.client == "test" && r.user_agent.as_deref() == Some("kpct-test")));
    // Still serving after all that.
    assert_eq!(get(addr, "/version").json()["gitVersion"], "v1.37.2");
}

#[test]
fn pages_continue_through_one_snapshot() {
    let (server, addr) = serve(cluster());
    let first = get(addr, "/api/v1/services?limit=3").json();
    assert_eq!(names(&first), ["db", "headless", "other"]);
    assert_eq!(first["metadata"]["remainingItemCount"], 1);
    let token = first["metadata"]["continue"]
        .as_str()
        .expect("continue")
        .to_string();
    server.publish(changed_cluster()).unwrap();
    let rest = get(addr, &format!("/api/v1/services?limit=3&continue={token}")).json();
    assert_eq!(
        names(&rest),
        ["web"],
        "the page of the first page's snapshot"
    );
    assert_eq!(rest["items"][0]["spec"]["ports"][0]["port"], 80);
    assert!(rest["metadata"].get("continue").is_none());
    assert_eq!(rv_of(&rest), rv_of(&first));
    // resourceVersion=0 is served whole, whatever the limit (the watch cache ignores it).
    assert_eq!(
        names(&get(addr, "/api/v1/services?limit=1&resourceVersion=0").json()).len(),
        4
    );
    let bad = get(addr, "/api/v1/services?limit=1&continue=garbage");
    assert_eq!(bad.status, 400);
}

#[test]
fn the_same_publications_give_the_same_bytes() {
    let answers = || {
        let (server, addr) = serve(cluster());
        server.publish(changed_cluster()).unwrap();
        let mut w = Watch::open(addr, "/api/v1/services?watch=1&resourceVersion=1");
        let events: Vec<Value> = (0..5).map(|_| w.next().expect("event")).collect();
        (
            get(addr, "/api/v1/services").body,
            get(addr, "/apis/discovery.k8s.io/v1/endpointslices?limit=1").body,
            events,
        )
    };
    assert_eq!(answers(), answers());
}

#[test]
fn stopping_a_client_closes_its_watches_and_listener() {
    let (server, addr) = serve(cluster());
    let rv = rv_of(&get(addr, "/api/v1/services").json());
    let mut w = Watch::open(
        addr,
        &format!("/api/v1/services?watch=true&resourceVersion={rv}"),
    );
    assert_eq!(w.status, 200);
    // An idle keep-alive connection, between requests.
    let mut idle = connect(addr);
    send(&mut idle, "GET", "/version", &[], None);
    let mut idle = BufReader::new(idle);
    let (status, headers) = head(&mut idle);
    let len: usize = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .unwrap()
        .1
        .parse()
        .unwrap();
    idle.read_exact(&mut vec![0; len]).unwrap();
    assert_eq!(status, 200);

    // And one in the middle of sending a request.
    let mut partial = connect(addr);
    partial.write_all(b"POST /apis/events.k8s.io/v1/namespaces/default/events HTTP/1.1\r\nContent-Length: 100\r\n\r\n{").unwrap();

    server.stop_listening("test");
    let started = std::time::Instant::now();
    assert!(w.next().is_none());
    let closed = match partial.read(&mut [0; 16]) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(closed, "the connection in mid-request is closed");
    let closed = match idle.read(&mut [0; 16]) {
        Ok(n) => n == 0,
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(closed, "the idle connection is closed");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "closed at once, not at a timeout"
    );
    assert!(TcpStream::connect(addr).is_err(), "the listener is closed");
}

#[test]
fn kubeconfig_points_at_the_server() {
    let text = kubeconfig("127.0.0.1:6443".parse().unwrap(), "node-a");
    let config = kube::config::Kubeconfig::from_yaml(&text).expect("a kubeconfig");
    assert_eq!(config.current_context.as_deref(), Some("kpct"));
    assert_eq!(
        config.clusters[0]
            .cluster
            .as_ref()
            .unwrap()
            .server
            .as_deref(),
        Some("http://127.0.0.1:6443")
    );
}

/// A listener made inside a network namespace of its own (a thread that unshared one, as a
/// node's is) serves there only: the root namespace's 127.0.0.1:6443 is not this server.
#[test]
fn a_listener_in_a_namespace_serves_there_only() {
    let server = ApiServer::start(cluster()).unwrap();
    let inside = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: unshare(2) has no memory arguments; only this thread moves.
                assert_eq!(
                    unsafe { libc::unshare(libc::CLONE_NEWNET) },
                    0,
                    "needs root"
                );
                apiserver::loopback_up().unwrap();
                let addr = SocketAddr::from(([127, 0, 0, 1], API_PORT));
                let listener = apiserver::bind(addr).unwrap();
                assert_eq!(server.serve_on(listener, "node-a").unwrap(), addr);
                get(addr, "/api/v1/nodes?fieldSelector=metadata.name%3Dnode-a")
            })
            .join()
            .unwrap()
    });
    assert_eq!(names(&inside.json()), ["node-a"]);
    let addr = SocketAddr::from(([127, 0, 0, 1], API_PORT));
    if let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        send(&mut stream, "GET", "/version", &[], None);
        let _ = stream.read(&mut [0; 64]);
    }
    let recorded = server.requests();
    assert_eq!(recorded.len(), 1, "{recorded:#?}");
    assert_eq!(recorded[0].client, "node-a");
}

#[test]
fn a_watch_ends_at_its_timeout_after_a_bookmark() {
    let (_server, addr) = serve(cluster());
    let rv = rv_of(&get(addr, "/api/v1/services").json());
    let started = std::time::Instant::now();
    let mut w = Watch::open(
        addr,
        &format!("/api/v1/services?watch=true&resourceVersion={rv}&allowWatchBookmarks=true&timeoutSeconds=3"),
    );
    let e = w.next().expect("a bookmark 2 s before the timeout");
    assert_eq!(
        (e["type"].as_str(), e["object"]["kind"].as_str()),
        (Some("BOOKMARK"), Some("Service"))
    );
    assert_eq!(rv_of(&e["object"]), rv);
    assert!(w.next().is_none(), "the stream ends");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2900) && took < Duration::from_secs(6),
        "{took:?}"
    );
}
