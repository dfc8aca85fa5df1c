"""A page server on 127.0.0.1 for tests/integration/run_metrics.sh (ctest registers only
*.sh): GET /redir answers 307 to /redir/, which serves one Prometheus gauge; any other path
answers 200 with an HTML page (not the exposition format). Each request's path,
Authorization and X-Token are appended to HEADERS_FILE; the port it bound is written to
PORT_FILE. Bounded: at most 600 one-second waits.

    python3 metrics_page_server.py PORT_FILE HEADERS_FILE"""
import http.server, sys
port_file, headers_file = sys.argv[1], sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open(headers_file, "a") as f:
            f.write(f"{self.path} {self.headers.get('Authorization')} {self.headers.get('X-Token')}\n")
        if self.path == "/redir":  # prometheus_client's ASGI app mounted at a path does this
            self.send_response(307)
            self.send_header("Location", "/redir/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path == "/redir/":
            body, kind = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n", "text/plain"
        else:
            body, kind = b"<!DOCTYPE html>\n<html><body>not metrics</body></html>\n", "text/html"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(port_file, "w").write(str(s.server_address[1]))
s.timeout = 1
for _ in range(600):  # bounded: ten minutes at most (the cleanup ends it sooner)
    s.handle_request()
