// Topology specs as `plait sim --topology` takes them: a family, a colon, key=value pairs.
//
//   ring:hosts=N            mesh:hosts=N            star:hosts=N
//   torus:dims=AxB[xC]
//   fattree:k=K[,oversub=R][,ecmp=flow|packet]
//   dragonfly:a=A,p=P,h=H[,arrangement=absolute|circulant][,routing=minimal|valiant]
//
// Every family takes rate= (bits per second: 200mbit, 1gbit, 100gbit; kbit, mbit, gbit, tbit
// as tc writes them) and latency= (per hop: 500ns, 20us, 1ms) for its links; defaults 1gbit
// and 1us. burst= (bytes as tc writes them: 512kb, 8mb) puts a token-bucket shaper on every
// link, as Linux TBF: that many bytes pass at peak= (default 10 x rate) before the rate
// holds. mtu= (bytes) says the links carry TCP/IPv4 over Ethernet frames of that MTU, so that
// a message's bytes are (mtu - 52) / (mtu + 14) of what the rate counts. queue=fifo (default
// fair) has each host's link serve its ranks' messages in posting order (LinkSpec::fifo). A
// bad spec is kInvalidUsage naming the offending part.
#pragma once

#include <memory>
#include <string_view>

#include "sim/topology.h"

namespace plait::sim {

std::unique_ptr<Topology> parse_topology(std::string_view spec);

// "1gbit" -> 1.25e8 bytes/s; "20us" -> 2e-5 s. Throw kInvalidUsage naming `what`.
double parse_rate(std::string_view text, std::string_view what);
double parse_latency(std::string_view text, std::string_view what);
double parse_size(std::string_view text, std::string_view what);  // "512kb" -> 524288

}  // namespace plait::sim
