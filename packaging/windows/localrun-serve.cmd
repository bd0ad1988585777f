@echo off
rem localrun: run the model server at login. Written by `localrun service install`;
rem remove with `localrun service uninstall`.
setlocal
set PYTHONUNBUFFERED=1
if not exist "@LOG_DIR@" mkdir "@LOG_DIR@"
cd /d "@HOME@"
rem /b: no new console; pythonw.exe has no window, and keeps the redirected log handles.
start "localrun" /b "@PYTHON@" -m localrun serve >> "@LOG_DIR@/server.log" 2>&1
