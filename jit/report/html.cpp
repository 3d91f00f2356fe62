// The report's page shell (see html.h).
#include "jit/report/html.h"

#include <fmt/format.h>

#include <cstdint>

namespace kiln::jit::report {

namespace {

constexpr std::string_view kSummaryOpen = "<script type=\"application/json\" id=\"kiln-summary\">";

constexpr std::string_view kStyle = R"css(
body{font:14px/1.45 -apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 2em 4em;color:#1b1b1b}
h1{font-size:1.6em;margin:.8em 0 .2em}h2{border-bottom:1px solid #ddd;margin-top:1.6em}
h3{margin:1.2em 0 .4em}table{border-collapse:collapse;margin:.4em 0}
td,th{border:1px solid #ddd;padding:2px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f8f8f8;border:1px solid #e4e4e4;padding:6px 8px;overflow:auto;font-size:12px}
code,pre{font-family:ui-monospace,Menlo,Consolas,monospace}
.muted{color:#777}.warn{color:#b71c1c}.reason{color:#6a1b9a}
.picture{overflow:auto;border:1px solid #e4e4e4;max-height:80vh;background:#fff}
.picture svg g.node{cursor:pointer}.group-detail{display:none;border:2px solid #90caf9;padding:4px 8px;margin:6px 0;background:#fafcff}
.group-detail.open{display:block}
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border:1px solid #bbb}
.k-kw{color:#0033b3;font-weight:600}.k-ty{color:#00796b}.k-cm{color:#8c8c8c;font-style:italic}
.k-nu{color:#1750eb}.k-pp{color:#9e880d}.k-st{color:#067d17}
.bar{vertical-align:middle}tr.expensive td{background:#fff4e5}
table.hide-views tr.step-view{display:none}tr.absorbed td{color:#999}
nav a{margin-right:1em}
)css";

// Groups expand on click; sources are highlighted when first opened; the body is marked once
// the script has run (the browser test checks the mark).
constexpr std::string_view kScript = R"js(
(function(){
  function toggle(id){var d=document.getElementById('detail-'+id);if(d)d.classList.toggle('open');}
  function clickable(root){root.querySelectorAll('svg g.node').forEach(function(g){
    if(!g.id)return;g.addEventListener('click',function(){toggle(g.id);});});}
  document.querySelectorAll('.picture').forEach(clickable);
  document.querySelectorAll('details.lazy-picture').forEach(function(d){
    d.addEventListener('toggle',function(){
      var t=d.querySelector('template'),p=d.querySelector('.picture');
      if(!d.open||!t||!p||p.firstChild)return;p.appendChild(t.content.cloneNode(true));clickable(p);});});
  var KW=/^(?:if|else|for|while|do|return|break|continue|switch|case|default|const|constexpr|static|inline|extern|template|typename|struct|using|namespace|__global__|__device__|__shared__|__restrict__|__forceinline__|__launch_bounds__|__syncthreads|volatile|sizeof|true|false)$/;
  var TY=/^(?:void|bool|char|short|int|long|unsigned|signed|float|double|half|__half|__nv_bfloat16|float2|float4|int2|int4|size_t|uint32_t|uint64_t|int32_t|int64_t|dim3|auto)$/;
  function esc(s){return s.replace(/&/g,'&amp;').replace(/</g,'&lt;').replace(/>/g,'&gt;');}
  function highlight(pre){
    if(pre.dataset.done)return;pre.dataset.done='1';
    var src=pre.textContent,out='',re=/(\/\/[^\n]*|\/\*[\s\S]*?\*\/)|(^[ \t]*#[^\n]*)|("(?:[^"\\\n]|\\.)*")|(\b\d[\d.]*(?:[eE][-+]?\d+)?[fFuUlL]*\b|\b0x[0-9a-fA-F]+\b)|([A-Za-z_]\w*)/gm,last=0,m;
    while((m=re.exec(src))){
      out+=esc(src.slice(last,m.index));last=re.lastIndex;var t=esc(m[0]),c=null;
      if(m[1])c='k-cm';else if(m[2])c='k-pp';else if(m[3])c='k-st';else if(m[4])c='k-nu';
      else if(KW.test(m[5]))c='k-kw';else if(TY.test(m[5]))c='k-ty';
      out+=c?'<span class="'+c+'">'+t+'</span>':t;}
    pre.innerHTML=out+esc(src.slice(last));
  }
  document.querySelectorAll('details.kernel').forEach(function(d){
    d.addEventListener('toggle',function(){if(d.open)d.querySelectorAll('pre.src').forEach(highlight);});
    if(d.open)d.querySelectorAll('pre.src').forEach(highlight);});
  document.querySelectorAll('input.show-views').forEach(function(box){
    box.addEventListener('change',function(){
      var t=box.parentNode.nextElementSibling;if(t)t.classList.toggle('hide-views',!box.checked);});});
  window.kilnHighlight=highlight;
  document.body.setAttribute('data-ready-ms',String(Math.round(performance.now())));
  document.body.setAttribute('data-report-ready','1');
})();
)js";

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string script_json(std::string_view json) {
  std::string out;
  for (std::size_t i = 0; i < json.size(); ++i) {
    if (json[i] == '<' && i + 1 < json.size() && json[i + 1] == '/') {
      out += "<\\/";
      ++i;
    } else {
      out += json[i];
    }
  }
  return out;
}

std::string format_bytes(std::int64_t bytes) {
  if (bytes < 1024) return fmt::format("{} B", bytes);
  if (bytes < 1024 * 1024) return fmt::format("{:.1f} KiB", bytes / 1024.0);
  return fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024.0));
}

std::string page(std::string_view title, std::string_view body, std::string_view summary_json) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>";
  out += escape(title);
  out += "</title>\n<style>";
  out += kStyle;
  out += "</style>\n";
  out += kSummaryOpen;
  out += script_json(summary_json);
  out += "</script>\n</head>\n<body>\n";
  out += body;
  out += "\n<script>";
  out += kScript;
  out += "</script>\n</body></html>\n";
  return out;
}

std::string summary_of(std::string_view html) {
  std::size_t start = html.find(kSummaryOpen);
  if (start == std::string_view::npos) return {};
  start += kSummaryOpen.size();
  std::size_t end = html.find("</script>", start);
  if (end == std::string_view::npos) return {};
  std::string json(html.substr(start, end - start));
  // Undo script_json.
  std::string out;
  for (std::size_t i = 0; i < json.size(); ++i) {
    if (json.compare(i, 3, "<\\/") == 0) {
      out += "</";
      i += 2;
    } else {
      out += json[i];
    }
  }
  return out;
}

}  // namespace kiln::jit::report
