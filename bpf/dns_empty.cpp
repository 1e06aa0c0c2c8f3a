// Keeps nodegate_dns non-empty before the tracer lands.
namespace nodegate { int dnsTracerLinked = 0; }
