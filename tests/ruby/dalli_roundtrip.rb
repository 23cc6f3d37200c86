# Drives a memcached-compatible server at ARGV[0] (host:port) with Debian's dalli (binary protocol
# only) and ActiveSupport::Cache::MemCacheStore. Prints "ok <check>" per passed check; exits 1
# with the failed check on stderr otherwise. Optional ARGV[1], ARGV[2]: SASL username, password.
# With DALLI_THROUGH_ROUTER set, stats are the router's own (no cmd_get).
require "dalli"
require "active_support"
require "active_support/cache"
require "active_support/cache/mem_cache_store"

server = ARGV.fetch(0)
options = { socket_timeout: 2, socket_max_failures: 1, down_retry_delay: 0.1 }
options.merge!(username: ARGV[1], password: ARGV[2]) if ARGV[1]

def check(name)
  ok = yield
  raise "#{name}: got #{ok.inspect}" unless ok == true
  puts "ok #{name}"
end

dc = Dalli::Client.new(server, options)
check("version") { dc.version.values.first.to_s.start_with?("1.6") }
check("set/get") { dc.set("dalli:a", "hello") && dc.get("dalli:a") == "hello" }
check("ruby object") { dc.set("dalli:h", { "x" => [1, 2] }) && dc.get("dalli:h") == { "x" => [1, 2] } }
check("raw binary value") do
  value = (0..255).map(&:chr).join.b * 10
  dc.set("dalli:bin", value, 0, raw: true)
  dc.get("dalli:bin").b == value
end
check("miss") { dc.get("dalli:missing").nil? }
check("get_multi") do
  dc.set("dalli:b", "2")
  dc.get_multi("dalli:a", "dalli:b", "dalli:missing") == { "dalli:a" => "hello", "dalli:b" => "2" }
end
check("add/replace") do
  dc.add("dalli:a", "x") == false && dc.replace("dalli:a", "world") != false &&
    dc.get("dalli:a") == "world" && !dc.replace("dalli:none", "x").is_a?(String) &&
    dc.get("dalli:none").nil?
end
check("cas") do
  dc.set("dalli:c", "1")
  dc.cas("dalli:c") { |v| (v.to_i + 1).to_s } != false && dc.get("dalli:c") == "2"
end
check("gets/set_cas conflict") do
  _value, cas = dc.get_cas("dalli:c")
  dc.set("dalli:c", "changed")
  dc.set_cas("dalli:c", "late", cas) == false && dc.get("dalli:c") == "changed"
end
check("incr/decr") do
  dc.incr("dalli:n", 1, nil, 10) == 10 && dc.incr("dalli:n", 5) == 15 && dc.decr("dalli:n", 20) == 0
end
check("incr miss without default") { dc.incr("dalli:nn", 1).nil? }
check("append/prepend") do
  dc.set("dalli:s", "b", 0, raw: true)
  dc.append("dalli:s", "c") && dc.prepend("dalli:s", "a") && dc.get("dalli:s", raw: true) == "abc"
end
check("touch") { dc.touch("dalli:a", 100) == true && dc.touch("dalli:none", 100).nil? }
check("delete") { dc.delete("dalli:a") && dc.get("dalli:a").nil? && !dc.delete("dalli:a") }
check("stats") do
  stats = dc.stats.values.first
  ENV["DALLI_THROUGH_ROUTER"] ? stats["pool"] == "alpha" : stats["cmd_get"].to_i > 0
end
check("quiet multi") do
  dc.multi { 10.times { |i| dc.set("dalli:q#{i}", i.to_s) } }
  dc.get_multi((0...10).map { |i| "dalli:q#{i}" }).size == 10
end
check("flush") { dc.flush && dc.get("dalli:b").nil? }

store = ActiveSupport::Cache::MemCacheStore.new(server, options.merge(namespace: "rails"))
check("rails write/read") { store.write("user/1", { name: "ann", tags: %w[a b] }) && store.read("user/1") == { name: "ann", tags: %w[a b] } }
check("rails fetch") { store.fetch("computed") { 41 + 1 } == 42 && store.fetch("computed") { 0 } == 42 }
check("rails read_multi") { store.write("x", 1) && store.read_multi("x", "computed", "none") == { "x" => 1, "computed" => 42 } }
check("rails increment") { store.write("counter", 5, raw: true) && store.increment("counter", 3) == 8 && store.decrement("counter") == 7 }
check("rails exist/delete") { store.exist?("x") && store.delete("x") && !store.exist?("x") }
check("rails expires_in") { store.write("short", "v", expires_in: 60) && store.read("short") == "v" }
check("rails clear") { store.clear && store.read("user/1").nil? }
puts "all passed"
