//! The page's style sheet and script, inlined into it (the page loads nothing).

pub(crate) const CSS: &str = r#"
:root{color-scheme:light dark;--bg:#fff;--fg:#1d1f23;--mute:#5f6670;--line:#d9dce1;--card:#f5f6f8;--compute:#2f7d32;--comm:#e08a00;--xfer:#7b4fb3;--host:#c62828;--lat:#ef7a7a;--sync:#1e6fb8;--unat:#9aa0a6;--late:#d62728;--high:#c62828;--med:#b26a00;--info:#5f6670}
@media (prefers-color-scheme:dark){:root{--bg:#16181c;--fg:#e6e8eb;--mute:#a0a6ae;--line:#353a42;--card:#1f2228;--compute:#5cb85f;--comm:#f0a830;--xfer:#a27be0;--host:#ef5350;--lat:#f39a9a;--sync:#5aa3e8;--unat:#6f757c;--late:#ff5a4f;--high:#ff6b66;--med:#f0a830;--info:#a0a6ae}}
*{box-sizing:border-box}body{margin:0 auto;max-width:1200px;padding:16px 24px 48px;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:28px 0 8px;border-bottom:1px solid var(--line);padding-bottom:4px}
.mute,.note{color:var(--mute)}.note{font-size:12px}.warn{border:1px solid var(--high);color:var(--high);padding:6px 10px;border-radius:6px}
.head{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}.tile{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:150px}
.tile .v{font-size:24px;font-weight:600;display:block}.tile .l{color:var(--mute);font-size:12px;display:block}.tile .flag{font-size:11px}.tile.dash .v{color:var(--mute)}
table{border-collapse:collapse;width:100%;font-size:13px}th,td{padding:3px 6px;border-bottom:1px solid var(--line);text-align:left;vertical-align:middle}
th{font-weight:600;color:var(--mute);white-space:nowrap}table.sortable th{cursor:pointer}table.sortable th:after{content:" ↕";opacity:.4}
td{white-space:nowrap}td.r,th.r{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.scroll{overflow-x:auto;max-width:100%}.ell-i{display:inline-block;max-width:min(300px,30vw);overflow:hidden;text-overflow:ellipsis;white-space:nowrap;vertical-align:bottom}.ell{display:block;max-width:min(560px,42vw);overflow:hidden;text-overflow:ellipsis;white-space:nowrap}
td.b{width:34%;min-width:160px}svg.spark{width:120px;height:24px;display:block;background:var(--card)}th .scale{display:block;font-weight:400;font-size:11px}svg.spark polyline{fill:none;stroke:var(--sync);stroke-width:1.5}td.sp{white-space:nowrap}svg.bar{width:100%;min-width:160px;height:12px;display:block;background:var(--card)}
.compute{fill:var(--compute);background:var(--compute)}.comm{fill:var(--comm);background:var(--comm)}.xfer{fill:var(--xfer);background:var(--xfer)}
.host{fill:var(--host);background:var(--host)}.lat{fill:var(--lat);background:var(--lat)}.sync{fill:var(--sync);background:var(--sync)}.unat{fill:var(--unat);background:var(--unat)}
.legend span{margin-right:14px;font-size:12px;white-space:nowrap}.sw{display:inline-block;width:10px;height:10px;margin-right:4px;border-radius:2px}
tr.slow td:first-child:after{content:" slow";color:var(--high);font-weight:600}tr.all td{font-weight:600}
.finding{border-left:4px solid var(--info);padding:4px 10px;margin:8px 0;background:var(--card);border-radius:0 6px 6px 0}
.finding.high{border-color:var(--high)}.finding.medium{border-color:var(--med)}.sev{font-weight:700;font-size:11px;margin-right:6px}
.finding.high .sev{color:var(--high)}.finding.medium .sev{color:var(--med)}.finding p{margin:2px 0}.vals{font-size:12px;color:var(--mute)}
.vals .n{margin-right:10px}code{background:var(--card);padding:1px 4px;border-radius:4px}
svg.hm text{fill:var(--fg);font-size:11px}svg.hm text.ax{text-anchor:middle;fill:var(--mute)}svg.hm .cell{fill:var(--late)}svg.hm .bg{fill:var(--card)}
.tl{position:relative;margin:6px 0}.tl-row{display:flex;align-items:center;gap:8px;height:16px}.tl-row.tl-axis{height:32px;align-items:flex-end}
.tl-l{flex:none;width:170px;font-size:11px;color:var(--mute);white-space:nowrap;overflow:hidden;text-overflow:ellipsis;text-align:right}
.tl canvas{flex:1 1 auto;min-width:0;width:100%;height:14px;display:block;background:var(--card)}.tl canvas.tl-x{height:30px;background:none}
.tl.tall .tl-row{height:26px}.tl.tall canvas{height:24px}.tl.dense .tl-row{height:9px}.tl.dense canvas{height:8px}.tl.dense .tl-l{font-size:8px;line-height:9px}
.fg{position:relative;width:100%;margin:4px 0 12px;background:var(--card)}.fg-f{position:absolute;box-sizing:border-box;height:17px;overflow:hidden;white-space:nowrap;text-overflow:ellipsis;font-size:11px;line-height:17px;padding:0 3px;color:#1d1f23;box-shadow:inset -1px 0 var(--bg)}.fg-f.fg-n{padding:0}
.fg0{background:#c4c8ce}.fg1{background:#f2a65a}.fg2{background:#e8c468}.fg3{background:#ef8a62}.fg4{background:#d9b38c}.fg5{background:#f4cf7c}.flame>p{margin:8px 0 2px}
.tip{position:fixed;z-index:5;pointer-events:none;background:var(--bg);color:var(--fg);border:1px solid var(--line);border-radius:6px;padding:6px 8px;font-size:12px;white-space:pre;box-shadow:0 2px 8px rgba(0,0,0,.2)}
"#;

/// Sort a `table.sortable` by the clicked column (numbers by `data-sort`, else text); draw
/// the activity timeline from its rows' data (and redraw on resize or a colour-scheme change).
pub(crate) const JS: &str = r#"
(function(){
  var tl=document.getElementById("timeline");if(!tl)return;
  var keys=["compute_ns","exposed_communication_ns","exposed_transfer_ns","host_bound_ns","launch_latency_ns","synchronization_ns","unattributed_ns"];
  var vars=["compute","comm","xfer","host","lat","sync","unat"];
  var names=["compute","exposed communication","exposed transfer","idle: host-bound","idle: launch/dependency latency","idle: synchronization","idle: unattributed"];
  var span=+tl.dataset.span||1,rows=Array.prototype.slice.call(tl.querySelectorAll("canvas.tl-c")),tip=document.getElementById("tip");
  rows.forEach(function(c){c._a=JSON.parse(c.dataset.value);c._s=JSON.parse(c.dataset.steps||"[]");});
  function fmt(v){var a=Math.abs(v);return a>=1e9?(v/1e9).toFixed(3)+" s":a>=1e6?(v/1e6).toFixed(2)+" ms":a>=1e3?(v/1e3).toFixed(1)+" µs":v+" ns";}
  function setup(c){var w=c.clientWidth,h=c.clientHeight,r=window.devicePixelRatio||1;c.width=Math.max(1,Math.round(w*r));c.height=Math.max(1,Math.round(h*r));var g=c.getContext("2d");g.setTransform(r,0,0,r,0,0);g.clearRect(0,0,w,h);return [g,w,h];}
  function width(c,i){var a=c._a,end=+c.dataset.end;return Math.max(1,Math.min(a.bin_ns,end-i*a.bin_ns));}
  function draw(){
    var st=getComputedStyle(document.documentElement),col=vars.map(function(v){return st.getPropertyValue("--"+v).trim();}),fg=st.getPropertyValue("--fg").trim(),mute=st.getPropertyValue("--mute").trim();
    rows.forEach(function(c){
      var s=setup(c),g=s[0],w=s[1],h=s[2],a=c._a,sx=w/span;
      for(var i=0;i<a.compute_ns.length;i++){
        var x0=Math.floor(i*a.bin_ns*sx),x1=Math.max(x0+1,Math.floor(Math.min((i+1)*a.bin_ns,+c.dataset.end)*sx)),y=h,bw=width(c,i);
        for(var k=0;k<7;k++){var v=a[keys[k]][i];if(!v)continue;var bh=h*v/bw;g.fillStyle=col[k];g.fillRect(x0,y-bh,x1-x0,bh);y-=bh;}
      }
      g.fillStyle=fg;g.globalAlpha=0.5;c._s.forEach(function(p){g.fillRect(Math.round(p[1]*sx),0,1,h);});g.globalAlpha=1;
    });
    var ax=tl.querySelector("canvas.tl-x");if(!ax)return;
    var s=setup(ax),g=s[0],w=s[1],h=s[2],sx=w/span;g.font="11px system-ui,sans-serif";g.fillStyle=mute;g.textBaseline="alphabetic";
    var steps=rows.length?rows[0]._s:[],last=-1e9;
    steps.forEach(function(p){var x=p[1]*sx,t=String(p[0]);if(x<0||x>w-8)return;if(x-last<g.measureText(t).width+8)return;g.fillText(t,x+2,11);g.fillRect(Math.round(x),2,1,11);last=x;});
    var nice=[1,2,5],step=1,e=1;while(span/step>Math.max(2,w/90)){step=nice[e%3]*Math.pow(10,Math.floor(e/3));e++;}
    for(var t=0;t<=span;t+=step){var x=t*sx;if(x>w-40)break;g.fillRect(Math.round(x),h-14,1,5);g.fillText(fmt(t),x+2,h-3);}
  }
  function at(c,ev){var r=c.getBoundingClientRect(),a=c._a,t=(ev.clientX-r.left)/r.width*span,i=Math.floor(t/a.bin_ns);return i>=0&&i<a.compute_ns.length?i:-1;}
  rows.forEach(function(c){
    c.addEventListener("mousemove",function(ev){var i=at(c,ev);if(i<0){tip.hidden=true;return;}var a=c._a,bw=width(c,i),lines=[c.dataset.label+", "+fmt(i*a.bin_ns)+" – "+fmt(i*a.bin_ns+bw)];
      var step=null;c._s.forEach(function(p){if(p[1]<=i*a.bin_ns+bw/2)step=p[0];});if(step!==null)lines[0]+=" (step "+step+")";
      for(var k=0;k<7;k++){var v=a[keys[k]][i];if(v)lines.push(names[k]+": "+fmt(v)+" ("+(100*v/bw).toFixed(1)+"%)");}
      if(lines.length==1)lines.push("not traced");
      tip.textContent=lines.join("\n");tip.hidden=false;tip.style.left=Math.min(ev.clientX+12,window.innerWidth-tip.offsetWidth-8)+"px";tip.style.top=(ev.clientY+14)+"px";});
    c.addEventListener("mouseleave",function(){tip.hidden=true;});
  });
  draw();window.addEventListener("resize",draw);
  if(window.matchMedia){var m=window.matchMedia("(prefers-color-scheme: dark)");if(m.addEventListener)m.addEventListener("change",draw);}
})();
document.querySelectorAll("table.sortable").forEach(function(t){
  t.querySelectorAll("thead th").forEach(function(th,i){
    th.addEventListener("click",function(){
      var b=t.tBodies[0],rows=Array.prototype.slice.call(b.rows).filter(function(r){return !r.classList.contains("all");});
      var dir=th.dataset.dir==="desc"?1:-1;th.dataset.dir=dir===1?"asc":"desc";
      function v(r){var c=r.cells[i];if(!c)return "";var s=c.getAttribute("data-sort");var n=parseFloat(s);return isNaN(n)?(s||c.textContent):n;}
      rows.sort(function(a,c){var x=v(a),y=v(c);return (x<y?-1:x>y?1:0)*dir;});
      rows.forEach(function(r){b.appendChild(r);});
    });
  });
});
"#;
